"""mrcd, the MRC daemon: asyncio + uvloop around the sans-I/O core (see docs/MRCD.md)."""
