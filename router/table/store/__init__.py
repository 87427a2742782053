"""A management table in Redis: the adapter (`management.ManagementTable`), its waiting-room
and steering reads and writes (`room`, `placement`), how the table is spelled in Redis
(`codec`), and the Lua scripts (`lua/`) that apply `router.table.store.management`'s rules
atomically."""
