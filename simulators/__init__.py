"""Device simulators: the device side of each protocol, on the drivers' own codecs."""
