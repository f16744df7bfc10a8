"""vitkit/utils/files.py: the bounded readers every user file passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from vitkit.utils.files import read_regular_file


@pytest.mark.parametrize("cap", [10**15, 2**62, 10**30])
def test_a_large_cap_reads_what_the_file_holds_without_allocating_the_cap(tmp_path: Path, cap: int) -> None:
    """`--max-pixels 10^15` (8 PB of file cap) ended in MemoryError, 2^62 in an OverflowError: the reader asked
    for `cap + 1` bytes at once before reading one; now it reads what the file holds."""
    f = tmp_path / "x.bin"
    f.write_bytes(b"abc" * 1000)
    assert read_regular_file(f, cap) == b"abc" * 1000
    with pytest.raises(ValueError, match=r"x.bin: 3,000 bytes is over the limit of 2,999"):
        read_regular_file(f, 2999)
    assert read_regular_file(tmp_path / "x.bin", 3000) == b"abc" * 1000
