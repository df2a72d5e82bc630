"""Examples of plug-in points: user code that a config names as `module:function`."""
