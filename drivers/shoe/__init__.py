"""Automated dealing shoe: wire protocol (sans-IO) and asyncio driver."""
