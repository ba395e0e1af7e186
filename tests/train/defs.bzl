"""The trainer's pytest modules: each runs tools/train through trainer_harness.py and asserts on the
records of its metrics file."""

_HARNESS = [
    "//tests/train:run_pytest.sh",
    "//tests/train:trainer_harness.py",
]

_HARNESS_TOOLS = {
    "HVX_TRAIN": "//tools/train",
    "HVX_MAKE_IDX": "//tests/train:make_tiny_idx.py",
}

def trainer_pytest(name, tools = {}, data = [], **kwargs):
    """An sh_test running `name`.py with pytest under @hvx_python's interpreter.

    Each tool NAME: label (besides the trainer and the dataset writer) reaches the test as the
    environment variable NAME holding the label's absolute path (trainer_harness.tool(NAME)).
    """
    all_tools = dict(_HARNESS_TOOLS)
    all_tools.update(tools)
    native.sh_test(
        name = name,
        srcs = ["//tests/train:run_pytest.sh"],
        args = [
            "$(rootpath @hvx_python//:python3)",
            "$(rootpath %s.py)" % name,
        ] + ["%s=$(rootpath %s)" % (var, label) for var, label in all_tools.items()],
        data = _HARNESS + [name + ".py", "@hvx_python//:python3"] + all_tools.values() + data,
        **kwargs
    )
