"""Run untrusted code: `LocalSandbox().run(code, timeout_s)` -> SandboxResult."""

from rlsvc.sandbox.local import LocalSandbox, SandboxLimits, SandboxResult, SandboxUnavailable

__all__ = ["LocalSandbox", "SandboxLimits", "SandboxResult", "SandboxUnavailable"]
