"""The client libraries' durable state, in Redis beside the management tables (`store`): a
sender's open groups and how they resume (`sender`, pure), a receiver's group statuses
(`groups`, pure). The store's Lua script is in `lua/`."""
