"""The sweeper: the patent's deletion process for both tables (`loop`), and the horizon an
entry's TTL may count (`horizon`)."""
