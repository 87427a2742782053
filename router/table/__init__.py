"""The management tables (the patent's guarantee ID -> destination, with a TTL).

Pure rules, no I/O: the decision's names and types (`routing`), a table's contents
(`state`), the waiting room (`room`), operators' placement (`placement`) and multicast
(`multicast`), all composed by the model (`model`), the specification the Redis scripts
must match. `store/` is the Redis adapter with its Lua scripts; `view` and `steer` are what
operators read and change; `gauges` feed the metrics endpoint."""
