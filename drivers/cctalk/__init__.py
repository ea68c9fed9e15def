"""ccTalk: the public coin/token acceptor protocol; codec and seat-acceptor bus driver."""
