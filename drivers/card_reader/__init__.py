"""Card reader device (Spanish 21 hole-card reader): protocol, driver; over USB or serial."""
