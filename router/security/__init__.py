"""Least privilege: each role's Kafka ACLs (`acls`, pure), and the checks at start-up that
Kafka (`kafka`) and Redis (`redis`) accept our credentials and allow what the role does."""
