"""The verdict (pure logic, no I/O): what was sent against what the destinations hold.
Lost, duplicated, reordered and split messages, every message accounted for (delivered,
expired or dead-lettered), priority bands, and every interleaving judged by the capacity
rule. Its records (`records`) are at the bottom; everything here reads them."""
