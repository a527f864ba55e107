"""Names and limits shared by the worker (which writes observations) and the judge (which reads them)."""

import re

# One probe's observation is `<probe>.json` (written last: its presence means the probe finished)
# and, when it recorded tensors, `<probe>.safetensors`.
JSON_SUFFIX = ".json"
TENSOR_SUFFIX = ".safetensors"
IMPORT_PROBE = "_import"
# What a child's runner writes on its acknowledgement pipe right before it imports the student's file: a child
# that ends abnormally without it failed in the grader's own code.
STARTED = b"started"

MAX_JSON_BYTES = 1 << 20          # one probe's JSON
MAX_TENSOR_BYTES = 64 << 20       # one probe's safetensors file
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.\-]{1,80}$")

# Probe status values written by the worker.
OK = "ok"                         # the probe ran to its end
RAISED = "raised"                 # student code raised out of the probe
NOT_IMPLEMENTED = "not_implemented"
GRADER_FAULT = "grader_fault"      # a probe raised on its own, in no student call: the grader's bug
FORBIDDEN_KEY = "forbidden_calls"
