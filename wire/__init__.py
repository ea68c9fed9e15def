"""The wire contract between a table and whoever listens to it (the floor, the tools): the
payload models, the topics and the proof a table sends beside each message. The table, the
floor and the CLI import it; it imports nothing of the daemon or the floor."""
