"""A probe's own exception is the grader's fault (`grader_error`, no point taken), never the student's; what the
student's code raises, or a breach of the contract a probe finds in what it returned, stays the student's."""

import importlib.util
import sys

import pytest
import torch

from grader.judge.observations import Observations, RunSummary
from grader.judge.verdicts import GraderFault, StudentRaised
from grader.worker import protocol
from grader.worker.probe import ContractBreach, grader_callback, part
from grader.worker.runner import classify

STUDENT_SOURCE = '''
import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.feedforward = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.GELU(), torch.nn.Linear(2, 2))

    def forward(self, x):
        return x + self.feedforward(x)


def broken(x):
    return x.no_such_method()
'''


@pytest.fixture
def student(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(STUDENT_SOURCE)
    spec = importlib.util.spec_from_file_location("probe_faults_student", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module, str(path)
    sys.modules.pop("probe_faults_student", None)


def raised(call):
    try:
        call()
    except BaseException as exc:  # noqa: BLE001 - the exception is what the test classifies
        return exc
    raise AssertionError("the call did not raise")


def test_a_name_the_contract_does_not_fix_is_the_graders_fault(student):
    module, path = student
    block = module.Block()
    exc = raised(lambda: block.feedforward.fc_out.weight.zero_())  # the old hand_limit's reach past the contract
    status, error = classify(exc, path, module)
    assert status == protocol.ProbeStatus.GRADER_FAULT
    assert "fc_out" in error["message"]


def test_an_exception_inside_a_student_call_is_the_students(student):
    module, path = student
    status, error = classify(raised(lambda: module.broken(torch.zeros(1))), path, module)
    assert status == protocol.ProbeStatus.RAISED
    assert error["where"].startswith("model.py:")


def test_a_contract_breach_found_by_a_probe_is_the_students(student):
    module, path = student
    exc = raised(lambda: part(module.Block(), "blocks"))
    assert isinstance(exc, ContractBreach)
    assert classify(exc, path, module)[0] == protocol.ProbeStatus.RAISED


def test_a_missing_name_of_the_student_module_is_the_students(student):
    module, path = student
    assert classify(raised(lambda: module.TransformerLM), path, module)[0] == protocol.ProbeStatus.RAISED


def test_a_hook_of_the_graders_failing_inside_a_student_call_is_the_graders(student):
    module, path = student
    block = module.Block()

    @grader_callback
    def hook(mod, args, out):
        return {}["no such key"]  # a bug of the grader's, run from inside the student's forward

    block.feedforward.register_forward_hook(hook)
    status, _ = classify(raised(lambda: block(torch.zeros(1, 2))), path, module)
    assert status == protocol.ProbeStatus.GRADER_FAULT


def test_the_judge_reports_a_probe_fault_as_grader_error_with_no_blame(tmp_path):
    obs_dir = tmp_path / "obs"
    obs_dir.mkdir()
    (obs_dir / f"{protocol.IMPORT_PROBE}.json").write_text('{"status": "ok", "values": {}}')
    error = {"type": "AttributeError", "message": "'Sequential' object has no attribute 'fc_out'", "where": None,
             "grader_where": "probes/transformer_lm.py:170 in hand_limit"}
    fault = {"status": protocol.ProbeStatus.GRADER_FAULT, "error": error}
    (obs_dir / "hand_limit.json").write_text(__import__("json").dumps(fault))
    observations = Observations("transformer_lm", "model.py", ["hand_limit"], obs_dir, RunSummary())
    with pytest.raises(GraderFault) as fault:
        observations.probe("hand_limit")
    said = fault.value.message.texts()
    assert "grader's fault" in said["en"] and "no point is taken" in said["en"]
    assert "这是评分器的问题" in said["zh"] and "不会因此扣分" in said["zh"]
    assert not isinstance(fault.value, StudentRaised)


def test_a_student_class_called_with_the_contracts_arguments_it_refuses_is_the_students(student):
    module, path = student
    exc = raised(lambda: module.Block(16, 4))  # Python refuses the call before any student frame runs
    assert classify(exc, path, module)[0] == protocol.ProbeStatus.RAISED


def test_a_breach_reaches_the_report_as_the_students_with_its_words(tmp_path):
    obs_dir = tmp_path / "obs"
    obs_dir.mkdir()
    (obs_dir / f"{protocol.IMPORT_PROBE}.json").write_text('{"status": "ok", "values": {}}')
    error = {"type": "ContractBreach", "message": "forward returned a tuple", "where": None, "breach": True}
    raised = {"status": protocol.ProbeStatus.RAISED, "error": error}
    (obs_dir / "forward.json").write_text(__import__("json").dumps(raised))
    observations = Observations("transformer_lm", "model.py", ["forward"], obs_dir, RunSummary())
    with pytest.raises(StudentRaised, match="your code breaks the contract: forward returned a tuple"):
        observations.probe("forward")
