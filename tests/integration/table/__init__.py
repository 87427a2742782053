"""The management table (Lua in the real Redis) against its model, its defects, `router table`
and steering."""
