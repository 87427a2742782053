"""What goes through the router in a run: the workload and the senders that send it, and
reading back what the destinations hold (a progress reader while the run goes on, and the
final read that the verdict judges)."""
