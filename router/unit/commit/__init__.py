"""A batch's transaction: the transactional session's state machine (`session`), the refused
records and counts (`bookkeeping`), in-flight leases (`leases`), Redis replica
acknowledgements (`replica_acks` the rule, `replicawait` the wait) and naming a shortage
of in-sync replicas (`insync`)."""
