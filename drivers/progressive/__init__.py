"""Control device of a table game progressive / bonus wager system: protocol and driver."""
