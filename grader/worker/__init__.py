"""The untrusted side: runs probes on student code inside the sandbox and records observations.

Nothing here judges. Everything here may be run next to hostile code, so it imports only the standard
library, torch and safetensors, and writes data only (JSON and safetensors), never pickles.
"""
