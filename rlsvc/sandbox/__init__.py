"""Run untrusted code: `LocalSandbox().run(code, timeout_s)` -> SandboxResult."""

from rlsvc.sandbox.local import LocalSandbox, LocalSession, SandboxLimits, SandboxResult, SandboxUnavailable

__all__ = ["LocalSandbox", "LocalSession", "SandboxLimits", "SandboxResult", "SandboxUnavailable"]
