"""Automated card shuffler: wire protocol (sans-IO) and asyncio driver."""
