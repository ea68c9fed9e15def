"""CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF, no reflection, no final XOR).

Check value for b"123456789" is 0x29B1, the catalogue value for this CRC.
"""

__all__ = ["crc16_ccitt"]


def _table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
        table.append(crc & 0xFFFF)
    return tuple(table)


_TABLE = _table()


def crc16_ccitt(data: bytes | bytearray | memoryview, crc: int = 0xFFFF) -> int:
    """Return the CRC-16/CCITT-FALSE of ``data``."""
    table = _TABLE
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ table[((crc >> 8) ^ byte) & 0xFF]
    return crc
