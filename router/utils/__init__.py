"""Small pieces every layer may use: the monotonic clock's periodic work (`clock`) and the
test-only fault injection of a unit (`faults`)."""
