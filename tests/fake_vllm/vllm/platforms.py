"""Stand-in of `vllm.platforms.current_platform`: a CUDA device with sleep mode by default;
tests switch it to vLLM's CPU platform (no sleep mode) with `use_platform("cpu")`."""

from __future__ import annotations


class _Platform:
    device_type = "cuda"
    sleep_mode = True

    def is_sleep_mode_available(self) -> bool:
        return self.sleep_mode


current_platform = _Platform()


def use_platform(device_type: str) -> None:
    """vLLM's CpuPlatform reports no sleep mode; CudaPlatform does."""
    current_platform.device_type = device_type
    current_platform.sleep_mode = device_type == "cuda"
