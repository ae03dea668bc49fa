"""The bounds of an ABI `indexer abi add` accepts (indexer/decoding/abi.py): each met exactly is accepted,
one past it refused with one clear line, before eth-abi reads any type."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from indexer.decoding import abi, abi_bounds, abi_parse
from indexer.decoding.abi_names import SHOWN_CHARS, check_abi_name


def event(name: str = "E", *types: str, **extra: Any) -> dict[str, Any]:
    return {"type": "event", "name": name, "inputs": [{"name": f"p{i}", "type": t} for i, t in enumerate(types)],
            **extra}


def nested(depth: int) -> dict[str, Any]:
    """A parameter of `depth` tuples, one within the other, around a uint256."""
    item: dict[str, Any] = {"name": "leaf", "type": "uint256"}
    for level in range(depth):
        item = {"name": f"t{level}", "type": "tuple", "components": [item]}
    return item


ONE_WORD = ["bool", "uint8", "uint16", "uint256"]  # 4 to 7 characters


def types_of_length(chars: int) -> list[dict[str, Any]]:
    """Parameters whose types, written with commas between them, are `chars` characters long:
    tuples of 64 one-word components, each tuple 321 to 513 characters."""
    count = -(-(chars + 1) // 514)
    lengths = [(chars - count + 1) // count] * count
    lengths[0] += (chars - count + 1) % count
    params = []
    for length in lengths:
        assert 321 <= length <= 513
        left = length - 65  # the components' own characters: 64 of them, 63 commas, 2 parentheses
        sizes = [4 + min(3, max(0, left - 4 * 64 - 3 * i)) for i in range(64)]
        params.append({"type": "tuple", "components": [{"type": ONE_WORD[s - 4]} for s in sizes]})
    written = ",".join(abi_parse._type_text(p, "", 0, False)[0] for p in params)
    assert len(written) == chars
    return params


def at_and_past(bound: int, make) -> list:
    return [pytest.param(make(bound), True, id=f"{bound}"), pytest.param(make(bound + 1), False, id=f"{bound + 1}")]


@pytest.mark.parametrize("document, accepted", [
    *at_and_past(abi_bounds.MAX_EVENTS, lambda n: [event(f"E{i}", "uint256") for i in range(n)]),
    # Repeats and anonymous events are entries the file makes eth-abi read: they count.
    *at_and_past(abi_bounds.MAX_EVENTS, lambda n: [event("E", "uint256")] * (n - 1) + [event("L", anonymous=True)]),
    *at_and_past(abi_bounds.MAX_PARAMS, lambda n: [event("E", *["uint8"] * n)]),
    *at_and_past(abi_bounds.MAX_PARAMS, lambda n: [event("E", "tuple")
                                            | {"inputs": [{"type": "tuple", "components": [{"type": "bool"}] * n}]}]),
    *at_and_past(abi_bounds.MAX_DEPTH, lambda n: [{"type": "event", "name": "E", "inputs": [nested(n)]}]),
    *at_and_past(abi_bounds.MAX_DIMENSIONS, lambda n: [event("E", "uint256" + "[]" * n)]),
    *at_and_past(abi_bounds.MAX_STATIC_WORDS, lambda n: [event("E", f"uint256[{n}]")]),
    # Sizes multiply through the dimensions and the tuples' members.
    *at_and_past(abi_bounds.MAX_STATIC_WORDS // 4, lambda n: [event("E", f"uint8[{n}][2][]")
                                                       | {"inputs": [{"type": "tuple[2]", "components": [
                                                           {"type": f"uint8[{n}]"}, {"type": f"bool[{n}]"}]}]}]),
    # The characters of the parameters' types, as the signature writes them (with their commas).
    *at_and_past(abi_bounds.MAX_TYPE_CHARS, lambda n: [{"type": "event", "name": "E", "inputs": types_of_length(n)}]),
])
def test_a_bound_met_is_accepted_and_one_past_it_refused(document, accepted):
    if accepted:
        assert abi_parse.parse_abi(document).events
    else:
        with pytest.raises(abi_parse.AbiError, match="at most|more than|longer than") as refused:
            abi_parse.parse_abi(document)
        assert "\n" not in str(refused.value) and len(str(refused.value)) < 300


@pytest.mark.parametrize("type_str, message", [
    ("uint256" + "[]" * 5000, f"has more than {abi_bounds.MAX_DIMENSIONS} array dimensions"),
    ("uint256[99999999999999999999]", f"more than {abi_bounds.MAX_STATIC_WORDS:,} words"),
    ("uint256[" + "9" * 5000 + "]", f"more than {abi_bounds.MAX_STATIC_WORDS:,} words"),
    ("uint256[1000][1000]", f"more than {abi_bounds.MAX_STATIC_WORDS:,} words"),
    ("uint256[x]", "not an array size: 'x'"),
    ("uint256[٣]", "not an array size"),
    ("uint" + "8" * 5000, f"longer than {abi_bounds.MAX_TYPE_CHARS:,} characters"),
])
def test_types_past_a_bound_are_refused_before_eth_abi_reads_them(type_str, message):
    with pytest.raises(abi_parse.AbiError, match=message) as refused:
        abi_parse.parse_abi([event("E", type_str)])
    assert len(str(refused.value)) < 300


def test_a_tuple_written_out_in_its_type_is_refused():
    """eth-abi reads "(uint256,string)[]", but decoding a tuple into JSON needs its members'
    entries ("components"): such an ABI, once registered, failed every decode window."""
    for type_str in ("(uint256,string)[]", "(bool)"):
        with pytest.raises(abi_parse.AbiError, match=f"a tuple is of type \"tuple\", its members in \"components\":"
                                               f" '{re.escape(type_str)}'"):
            abi_parse.parse_abi([event("E", type_str)])


def test_the_file_may_be_at_most_max_file_bytes(tmp_path: Path):
    path = tmp_path / "abi.json"
    with path.open("wb") as file:
        file.truncate(abi_bounds.MAX_FILE_BYTES + 1)  # a sparse file: read, not stored
    with pytest.raises(abi_parse.AbiError, match=f"larger than {abi_bounds.MAX_FILE_BYTES >> 20} MiB"):
        abi.registration("big", str(path))
    text = json.dumps([event("E", "uint256")])
    path.write_text(text + " " * (abi_bounds.MAX_FILE_BYTES - len(text)))
    assert abi.registration("big", str(path)).parsed.events


def test_long_names_are_shown_short():
    name = "Transfer" + "X" * 10_000
    with pytest.raises(abi_parse.AbiError) as refused:
        abi_parse.parse_abi([event(name, "uint7")])
    assert "not a type eth-abi can decode: 'uint7'" in str(refused.value)
    assert f"… ({len(name):,} characters)" in str(refused.value) and len(str(refused.value)) < 300
    with pytest.raises(ValueError) as refused:
        check_abi_name("n" * 10_000)
    assert len(str(refused.value)) < SHOWN_CHARS + 150
