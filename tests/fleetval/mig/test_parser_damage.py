"""Damage an adversarial review found the MIG parsers let through as a shorter or wrong parse: an
`-lgipp` line that lost its GPU index or had its words reordered, bytes in front of a table line
that ended the table early, a MIG UUID that is no UUID. Each is now a ParseError (the callers'
error or inconclusive verdict, never a pass); the real outputs around them still parse."""

from __future__ import annotations

import pytest

from fleetval.errors import ParseError
from fleetval.mig.parser import (
    MigDevice,
    Placements,
    parse_lgi,
    parse_lgip,
    parse_lgipp,
    parse_mig,
    parse_mig_list,
)
from tests.fleetval.mig.test_parser import A30, CGI_LGI_L, H100, L_MIXED, L_SINGLE

LGIPP_15 = "GPU  0 Profile ID 15 Placements: {0,2,4,6}:2"
LGI_ROW_2 = "|   0  MIG 1g.6gb          14        4          1:1     |"
LGIP_ROW_2 = "|   0  MIG 1g.10gb+me    20     1/1        9.62       No     14     1     0   |"
LGIP_ROW_2_SECOND = "|" + " " * 61 + "1     1     1   |"
BORDER = "+" + "-" * 55 + "+"


def refused(text: str) -> ParseError:
    """The text is a ParseError for `parse_mig` (what `fleetval parse mig` and the suite read)."""
    with pytest.raises(ParseError) as caught:
        parse_mig(text)
    assert caught.value.tool == "mig" and len(caught.value.excerpt) <= 200
    return caught.value


# --- 1. -lgipp lines that lost a word or had them reordered ----------------------------------------

DAMAGED_LGIPP = {
    "GPU index lost": "GPU  Profile ID 15 Placements: {0,2,4,6}:2",
    "GPU index blanked": "GPU    Profile ID 15 Placements: {0,2,4,6}:2",
    "GPU word lost": " 0 Profile ID 15 Placements: {0,2,4,6}:2",
    "GPU part last": "Profile ID 15 Placements: {0,2,4,6}:2 GPU  0",
    "profile part first": "Profile ID 15 GPU  0 Placements: {0,2,4,6}:2",
    "placements first": "Placements: {0,2,4,6}:2 GPU  0 Profile ID 15",
    "Profile ID lost": "GPU  0 15 Placements: {0,2,4,6}:2",
    "only the placement set": "{0,2,4,6}:2",
    "bytes before it": "\x00\x00" + LGIPP_15,
}


@pytest.mark.parametrize("name", sorted(DAMAGED_LGIPP))
def test_a_damaged_lgipp_line_is_an_error_not_a_shorter_list(name: str) -> None:
    text = H100.replace(LGIPP_15, DAMAGED_LGIPP[name], 1)
    assert text != H100
    with pytest.raises(ParseError, match="-lgipp"):
        parse_lgipp(text)
    refused(text)


def test_lgipp_lines_among_other_lines_still_parse() -> None:
    """Prompts, markdown and `-cgi` success lines around the placements are not placements."""
    text = (
        "$ sudo nvidia-smi mig -lgipp\n```\n"
        + LGIPP_15
        + "\n```\nSuccessfully created GPU instance ID  2 on GPU  0 using profile MIG 3g.40gb (ID  9)\n"
        "sudo nvidia-smi mig -cgi 9,15,19 -C\n"
    )
    assert parse_lgipp(text) == [Placements(0, 15, (0, 2, 4, 6), 2)]


# --- 2. bytes in front of a table line: the table must not end early -------------------------------


def damaged_lgi(old: str, new: str) -> str:
    text = A30.replace(old, new, 1)
    assert text != A30
    return text


DAMAGED_LGI = {
    "two bytes before a row": damaged_lgi(LGI_ROW_2, "\x00\x00" + LGI_ROW_2),
    "two letters before a row": damaged_lgi(LGI_ROW_2, "ab" + LGI_ROW_2),
    "the row's frame replaced": damaged_lgi(LGI_ROW_2, "\ufffd" + LGI_ROW_2[1:]),
    "bytes on both sides of a row": damaged_lgi(LGI_ROW_2, "ab" + LGI_ROW_2 + "cd"),
    "bytes before a border between rows": damaged_lgi("0:1     |\n" + BORDER, "0:1     |\n\x00\x00" + BORDER),
    "a blank line between a row and its border": damaged_lgi(
        "0:1     |\n" + BORDER, "0:1     |\n\n" + BORDER
    ),
    "a stray line between a row and its border": damaged_lgi(
        "0:1     |\n" + BORDER, "0:1     |\nxx\n" + BORDER
    ),
    "the title damaged: rows without their table": damaged_lgi("| GPU instances:", "| GPU instanc\x00s:"),
    "a row lost between its borders": damaged_lgi(LGI_ROW_2 + "\n", ""),
    "the last row lost above its border": damaged_lgi(
        "|   0  MIG 1g.6gb          14        6          3:1     |\n", ""
    ),
}


@pytest.mark.parametrize("name", sorted(DAMAGED_LGI))
def test_damage_inside_an_lgi_table_is_an_error_not_fewer_rows(name: str) -> None:
    text = DAMAGED_LGI[name]
    refused(text)
    with pytest.raises(ParseError):
        parse_lgi(text)


DAMAGED_LGIP = {
    "two bytes before a profile": H100.replace(LGIP_ROW_2, "\x00\x00" + LGIP_ROW_2, 1),
    "two bytes before a profile's second line": H100.replace(
        LGIP_ROW_2_SECOND, "\x00\x00" + LGIP_ROW_2_SECOND, 1
    ),
    "two bytes before a border": H100.replace(
        LGIP_ROW_2_SECOND + "\n+", LGIP_ROW_2_SECOND + "\n\x00\x00+", 1
    ),
    "bytes on both sides of a profile": H100.replace(LGIP_ROW_2, "ab" + LGIP_ROW_2 + "cd", 1),
}


@pytest.mark.parametrize("name", sorted(DAMAGED_LGIP))
def test_damage_inside_an_lgip_table_is_an_error_not_fewer_profiles(name: str) -> None:
    text = DAMAGED_LGIP[name]
    assert text != H100
    refused(text)
    with pytest.raises(ParseError):
        parse_lgip(text)


def test_tables_still_end_where_their_output_ends() -> None:
    """What follows a table's closing border (a prompt, markdown, a blank line, the end of a cut
    text) ends it; a table cut after a complete row (the text ends there) keeps its rows."""
    assert len(parse_lgi(A30 + "\nroot@host:~# nvidia-smi -L\n")) == 4
    assert len(parse_lgi(A30 + "```\n### Current status\n")) == 4
    cut_after_a_row = A30[: A30.index(LGI_ROW_2) + len(LGI_ROW_2)]
    assert len(parse_lgi(cut_after_a_row)) == 2
    assert len(parse_lgi(cut_after_a_row + "\n")) == 2
    assert [g.instance_id for g in parse_lgi(CGI_LGI_L)] == [7, 8, 9, 2]


# --- 3. a MIG device UUID must be a UUID -----------------------------------------------------------

MIG_UUID = "MIG-9d14fb21-4ae1-546f-a636-011582899c39"
NOT_MIG_UUIDS = {
    "not hex": "MIG-zzzzzzzz-4ae1-546f-a636-011582899c39",
    "one letter": "MIG-x",
    "no dashes": "MIG-9d14fb214ae1546fa636011582899c39",
    "a group short": "MIG-9d14fb21-4ae1-546f-a636-01158289c39",
    "a group long": "MIG-9d14fb21-4ae1-546f-a636-0115828999c39",
    "dashes only": "MIG-" + "-" * 36,
    "a GPU UUID not hex": "MIG-GPU-e91edf3b-b297-37c1-a2a7-7601c3238fzz/1/0",
    "a GPU UUID without its instances": "MIG-GPU-e91edf3b-b297-37c1-a2a7-7601c3238fa2",
    "GPU instance not a number": "MIG-GPU-e91edf3b-b297-37c1-a2a7-7601c3238fa2/a/0",
    "a path": "MIG-GPU-e91edf3b-b297-37c1-a2a7-7601c3238fa2/1/0/../..",
}


@pytest.mark.parametrize("name", sorted(NOT_MIG_UUIDS))
def test_a_mig_device_uuid_that_is_no_uuid_is_an_error(name: str) -> None:
    text = L_MIXED.replace(MIG_UUID, NOT_MIG_UUIDS[name], 1)
    assert text != L_MIXED
    with pytest.raises(ParseError, match="MIG device"):
        parse_mig_list(text)
    refused(text)


def test_real_mig_uuid_forms_still_parse() -> None:
    """`MIG-<uuid>` (R470 on, every fixture) and R450's `MIG-GPU-<gpu uuid>/<gi>/<ci>`."""
    assert [d.uuid for gpu in parse_mig_list(L_SINGLE) for d in gpu.devices][2] == MIG_UUID
    r450 = (
        "GPU 0: A100-SXM4-40GB (UUID: GPU-e91edf3b-b297-37c1-a2a7-7601c3238fa2)\n"
        "  MIG 1g.5gb Device 0: (UUID: MIG-GPU-e91edf3b-b297-37c1-a2a7-7601c3238fa2/13/0)\n"
    )
    [gpu] = parse_mig_list(r450)
    assert gpu.devices == (MigDevice("1g.5gb", 0, "MIG-GPU-e91edf3b-b297-37c1-a2a7-7601c3238fa2/13/0"),)


def test_a_gpu_uuid_must_be_a_uuid_too() -> None:
    gpu_uuid = "GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4"
    for bad in (
        "GPU-" + "-" * 36,
        "GPU-b4895dbf9350-2524-a89b-98161ddd9fe4-",
        "GPU-b4895dbf-9350-2524-a89b-98161ddd9fez",
    ):
        with pytest.raises(ParseError, match="nvidia-smi -L"):
            parse_mig_list(L_SINGLE.replace(gpu_uuid, bad, 1))
