"""helpers.lab.op_recorder: what notebook 03's going-deeper recorder shows, on every supported torch."""

import torch

from helpers.lab.op_recorder import RecordOps


def test_factory_with_device_is_one_operation():
    with RecordOps() as rec:
        torch.zeros(4, device="meta")
    assert rec.ops == ["zeros(meta)"]


def test_create_then_move_is_two_operations():
    with RecordOps() as rec:
        torch.zeros(4).to("meta")
    assert rec.ops == ["zeros(cpu)", "_to_copy(meta)"]


def test_operations_without_a_device_keyword_record_an_empty_device():
    x = torch.ones(2)
    with RecordOps() as rec:
        y = x + 1
    assert rec.ops == ["add()"] and torch.equal(y, torch.full((2,), 2.0))


def test_recorder_is_inactive_outside_its_block():
    with RecordOps() as rec:
        pass
    torch.zeros(1)
    assert rec.ops == []
