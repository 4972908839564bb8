import pytest
from cluster_doctor.domain.nodes import (
    MAX_EXPANSION,
    InvalidNodeName,
    InvalidNodeRange,
    NodeRange,
    compress,
    parse_node_range,
    validate_node_name,
)
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize("name", ["gpu-001", "a", "node-7.rack-3.example.com", "0abc"])
def test_valid_node_names(name):
    assert validate_node_name(name) == name


@pytest.mark.parametrize("name", ["", "GPU-01", "gpu_01", "-gpu", "gpu-", "gpu..1", "a" * 254, "gpu 1",
                                  "gpu-1; drop table x", "gpu-1'", None, 42])
def test_invalid_node_names_are_refused_with_the_name(name):
    with pytest.raises(InvalidNodeName, match="invalid Kubernetes node name"):
        validate_node_name(name)


def test_hostlist_ranges_lists_and_combinations():
    r = parse_node_range("gpu-[001-003,100], rack1-gpu[01-02]  extra-node")
    assert r.expand() == ["extra-node", "gpu-001", "gpu-002", "gpu-003", "gpu-100", "rack1-gpu01", "rack1-gpu02"]


def test_multi_dimensional_hostlist():
    assert parse_node_range("r[1-2]-g[1-2]").expand() == ["r1-g1", "r1-g2", "r2-g1", "r2-g2"]


def test_globs_match_against_a_node_list():
    r = parse_node_range("gpu-a*, gpu-b0?, gpu-[001-002]")
    nodes = ["gpu-a1", "gpu-a22", "gpu-b01", "gpu-b011", "gpu-001", "gpu-003", "cpu-a1"]
    assert r.filter(nodes) == ["gpu-a1", "gpu-a22", "gpu-b01", "gpu-001"]
    with pytest.raises(InvalidNodeRange, match="glob"):
        r.expand()


def test_empty_expression_means_every_node():
    r = parse_node_range("")
    assert r.is_all and r.filter(["x", "y"]) == ["x", "y"]
    assert parse_node_range(None).is_all


@pytest.mark.parametrize("expression, offending", [
    ("gpu-[001-", "gpu-[001-"),
    ("gpu-[5-1]", "gpu-[5-1]"),
    ("ok-1, GPU-2", "GPU-2"),
    ("gpu-[a-c]", "gpu-[a-c]"),
    ("gpu_*", "gpu_*"),
    ("node]", "node]"),
])
def test_invalid_expressions_name_the_offending_part(expression, offending):
    with pytest.raises(InvalidNodeRange) as err:
        parse_node_range(expression)
    assert offending in str(err.value)
    assert "\n" not in str(err.value)


def test_expansion_beyond_the_cap_is_refused():
    with pytest.raises(InvalidNodeRange, match=str(MAX_EXPANSION)):
        parse_node_range("gpu-[000000-200000]")
    # the cap applies to the whole expression, not each term
    with pytest.raises(InvalidNodeRange, match=str(MAX_EXPANSION)):
        parse_node_range("a-[00000-60000],b-[00000-60000]")


def test_compress_round_trips():
    names = ["gpu-001", "gpu-002", "gpu-004"]
    assert compress(names) == "gpu-[001-002,004]"
    assert parse_node_range(compress(names)).expand() == names


@given(st.sets(st.integers(0, 999), min_size=1, max_size=60))
def test_compress_then_expand_is_identity(numbers):
    names = [f"gpu-{n:03d}" for n in sorted(numbers)]
    assert parse_node_range(compress(names)).expand() == names


@pytest.mark.parametrize("name", ["gpu-001\n", "gpu-001\n\n", "\ngpu-001", "a" * 254, "gpu-.001",
                                  ".".join(["a" * 63] * 4) + ".abc"])
def test_node_names_must_match_whole_with_bounded_length(name):
    with pytest.raises(InvalidNodeName):
        validate_node_name(name)


def test_longest_valid_labels_and_name():
    assert validate_node_name("a" * 63) == "a" * 63
    assert validate_node_name("a" * 70) == "a" * 70  # the apiserver does not bound the parts
    name = ".".join(["a" * 63] * 3) + "." + "b" * 61  # 253 characters
    assert validate_node_name(name) == name


def test_a_glob_with_a_trailing_newline_is_refused_and_messages_stay_short():
    with pytest.raises(InvalidNodeRange, match="unexpected character"):
        NodeRange._check_glob("gpu-*\n")  # the expression is split on whitespace; the check stands alone
    with pytest.raises(InvalidNodeRange) as info:
        parse_node_range("x" * 5000 + "[")
    assert len(str(info.value)) < 200
    with pytest.raises(InvalidNodeRange, match="characters long"):
        parse_node_range("gpu-1," * 5000)
