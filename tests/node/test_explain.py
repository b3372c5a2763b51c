"""builder.node.explain: real error strings -> cause and fix, versions filled in.

Every string below was printed by a real Ascend stack (ascend-facts.md "What users
hit", and the public issue threads named in errors.yaml ``source``).
"""

from __future__ import annotations

import json
import re
import string

import pytest

from builder.node import explain as ex
from builder import knowledge
from builder.node.host import HostInfo

# id -> real texts that must map to it (each entry of the table has at least one)
REAL = {
    "platform-mismatch": [
        "WARNING: The requested image's platform (linux/amd64) does not match the detected host platform "
        "(linux/arm64/v8) and no specific platform was requested",
        "exec /usr/bin/python3: exec format error",
    ],
    "dcmi-device-in-use": [
        "DrvMngGetConsoleLogLevel failed. (g_conLogLevel=3)\n"
        "dcmi model initialized failed, because the device is used. ret is -8020",
    ],
    "dcmi-init-failed": [
        "dcmi module initialize failed. ret is -8005",
        "DrvMngGetConsoleLogLevel failed. (ret=4)\ndcmi module initialize failed. ret is -8005",
    ],
    "no-valid-device": [
        "rtGetDeviceCount execute failed, reason=[driver error:no valid device]"
        "[FUNC:FuncErrorReason][FILE:error_message_manage.cc][LINE:53]\n"
        "get device count failed, runtime result = 207004.[FUNC:ReportCallError][FILE:log_inner.cpp][LINE:161]",
        "RuntimeError: aclrtGetDeviceCount failed, error code is 207004",
    ],
    "driver-libs-not-mounted": [
        "ImportError: libascend_hal.so: cannot open shared object file: No such file or directory",
    ],
    "cann-env-not-set": [
        "  File \"/usr/local/python3.10/lib/python3.10/site-packages/torch_npu/utils/__init__.py\", line 1\n"
        "    from torch_npu import _C\nImportError: libhccl.so: cannot open shared object file: No such file or directory",
        "   raise RuntimeError(\"Failed to infer device type\")\nRuntimeError: Failed to infer device type",
    ],
    "torch-npu-cann-mismatch": [
        "ImportError: /usr/local/python3.10.14/lib/python3.10/site-packages/torch_npu/lib/libtorch_npu.so: "
        "undefined symbol: _ZN3atb15CreateOperationINS_5infer14GroupTopkParamEEEiRKT_PPNS_9OperationE",
        "OSError: /home/mtp/Ascend/nnal/atb/latest/atb/cxx_abi_1/lib/libtbe_adapter.so: undefined symbol: "
        "_ZN3Mki2DlC1ERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEb",
    ],
    "nnal-missing": [
        "ImportError: libatb.so: cannot open shared object file: No such file or directory",
    ],
    "driver-too-old": ["RuntimeError: not support driver 24.1"],
    "firmware-driver-mismatch": ["        Compatibility                  : NOK"],
    "torch-npu-not-importable": [
        "ModuleNotFoundError: No module named 'torch_npu'",
        "ImportError: cannot import name 'npu_format_cast' from 'torch_npu'",
    ],
    # Ascend's documented error codes (the sources in errors.yaml). Where no public log was found,
    # the text is the message format of Ascend's error code reference, filled in ("format:").
    "hccl-resource-unavailable": [
        "AssertionError: Rank 0 raised: create_config:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:130 HCCL "
        "function error: hcclCommInitRootInfoConfig(numRanks, &rootInfo, rank, config, &(comm->hcclComm_)), "
        "error code is 7",
        "[ERROR] HCCL(3626636,all_reduce_test):2000-03-15-13:18:47.639.869 [topoinfo_detect.cc:744] "
        "[3626636][InitGroupStage][RanktableDetect]StartRootNetwork failed, ret[7]",
    ],
    "hccl-function-error": [
        "[rank1]: RuntimeError: create_config:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:102 HCCL function "
        "error: hcclCommInitRootInfoConfig(numRanks, &rootInfo, rank, config, &(comm->hcclComm_)), error code is 15",
        "RuntimeError: create_config:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:148 HCCL function error: "
        "hcclCommInitRootInfoConfig(numRanks, &rootInfo, rank, config, &(comm->hcclComm_)), error code is 1",
        "[rank1]: RuntimeError: InnerRunOpApi:torch_npu/csrc/framework/OpParamMaker.cpp:281 OPS function error: "
        "HcclAllreduce, error code is 6",
    ],
    "hccl-socket-timeout": [
        "EI0006: 2024-08-05-18:15:21.270.506 Getting socket times out. Reason: Remote Rank did not send the data in "
        "time. Please check the reason for the rank being stuck",
        "[ERROR] HCCL(137309,all_reduce_test):2025-12-24-16:19:45.416.014 [hccl_socket_manager.cc:813] "
        "[137400][Wait][LinkEstablish]wait socket establish timeout, role[0] rank[0] timeout[120 s]",
    ],
    "hccl-execution-timeout": [
        # format: EI0002 in the CANN error code reference
        "EI0002: The wait execution of the Notify register times out. Reason: The Notify register has not "
        "received the Notify record from remote rank: [1].",
    ],
    "npu-out-of-memory": [
        "RuntimeError: NPU out of memory. Tried to allocate 22.00 MiB (NPU 0; 60.97 GiB total capacity; 10.24 GiB "
        "already allocated; 10.24 GiB current active; 19.52 MiB free; 10.65 GiB reserved in total by PyTorch) If "
        "reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.",
    ],
    "aicpu-exception": [
        "[W730 06:16:22.869118032 compiler_depend.ts:526] Warning: NPU warning, error code is 507018[Error]: ",
        "        rtDeviceSynchronizeWithTimeout execute failed, reason=[aicpu exception][FUNC:FuncErrorReason]"
        "[FILE:error_message_manage.cc][LINE:53]",
    ],
    "aicore-exception": [
        "record event failed, runtime result = 507015[FUNC:ReportCallError][FILE:log_inner.cpp][LINE:148]",
        "prefill_1.Log:5784:RuntimeError: ACL stream synchronize failed, error code:507035",
        "rtEventRecord execution failed, reason=aicore exception[FUNC:FuncErrorReason][FILE:error_message_manage.cc]",
    ],
    "stream-sync-timeout": [
        "EE1002: Stream synchronize timeout. ",  # format: EE1002 in the CANN error code reference
    ],
    "cann-inner-error": [
        "EZ9999: Inner Error!",
        "[rank1]: EE9999: Inner Error!",
        "EH9999: Inner Error!",
    ],
    # issue 32: device set-up, context, memory and the OPP (Ascend's ACL and E3 tables)
    "device-setup-failed": [
        "RuntimeError: Initialize:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:146 NPU function error: "
        "c10_npu::SetDevice(device_id_), error code is 507033",  # Ascend/pytorch#67
        "[ERROR] aclrtSetDevice(deviceId) failed: 507033 (/tmp/run/main.cpp:72)",  # hw-native-sys/PTOAS#341
        "        rtSetDevice execution failed, reason=device retain error[FUNC:FuncErrorReason]"
        "[FILE:error_message_manage.cc][LINE:65]",
    ],
    "context-null": [
        # format: torch_npu's NPU function error line with ACL_ERROR_RT_CONTEXT_NULL
        "RuntimeError: NPU function error: aclrtGetCurrentContext(&ctx), error code is 107002",
    ],
    "invalid-device-id": [
        "RuntimeError: NPU function error: aclrtSetDevice(9), error code is 107001",  # format
    ],
    "opp-path-invalid": [
        "RuntimeError: NPU function error: aclInit(nullptr), error code is 148049",  # format
    ],
    "opp-verify-failed": [
        "E30006: 2025-11-19-11:14:58.516.606 Failed to verify the OPP",  # vllm-ascend#4284
        "E30009: Failed to verify the signature of package x.tar.gz on the device. Reason: x.",  # format
    ],
    "device-process-failed": [
        "E30003: The number of started user processes on the device exceeds the limit.",  # format
        "E30005: Failed to connect the device.",  # format
    ],
    "acl-memory-allocation": [
        "RuntimeError: NPU function error: aclrtMalloc(&ptr, size, ACL_MEM_MALLOC_HUGE_FIRST), error code is 207001",
    ],
    "acl-no-permission": [
        "open device 0 failed, runtime result = 207006.",  # format
    ],
    "driver-link-error": [
        "RuntimeError: NPU function error: aclrtSynchronizeStream(stream), error code is 507899",  # format
        "wait for compute device to finish failed, runtime result = 507901.",  # format
    ],
}

A3_LABELS = {
    "io.ascend-build.cell": "cann8.0.rc3-910b-ubuntu22.04-py3.10-torch_npu2.4.0-aarch64",
    "io.ascend-build.variant": "npu", "io.ascend-build.arch": "aarch64", "io.ascend-build.chip": "910b",
    "io.ascend-build.cann": "8.0.RC3", "io.ascend-build.torch-npu": "2.4.0", "io.ascend-build.min-driver": "24.1.RC3",
}


def test_table_is_well_formed():
    ids = [e.id for e in ex.table()]
    assert len(ids) == len(set(ids)) and set(ids) == set(REAL)
    for e in ex.table():
        assert e.patterns and e.cause and e.fix and e.source
        groups = {g for p in e.patterns for g in p.groupindex}
        used = {name for _, name, _, _ in string.Formatter().parse(e.fix) if name}
        assert used <= set(ex.PLACEHOLDERS) | groups, (e.id, used - set(ex.PLACEHOLDERS) - groups)
        assert not re.search(r"https?://|www\.", e.fix + e.source + e.cause)


@pytest.mark.parametrize("entry_id, text", [(i, t) for i, texts in REAL.items() for t in texts])
def test_every_real_string_maps_to_its_entry(entry_id, text):
    assert [m.id for m in ex.explain(text)] == [entry_id]


def test_unknown_text_explains_nothing():
    assert ex.explain("Segmentation fault (core dumped)") == []
    assert ex.explain("") == []
    assert ex.format_explanations([]) == ""


def test_driver_too_old_filled_from_host_and_image():
    host = HostInfo(driver="23.0.3")
    [m] = ex.explain("not support driver 23.0", host, A3_LABELS)
    # the text's driver is the subject; the image's minimum comes from its label
    assert "to at least 24.1.RC3" in m.fix and "the host driver 23.0" in m.fix
    [m] = ex.explain("RuntimeError: not support driver", host, {"io.ascend-build.cann": "8.0.RC3"})
    assert f"to at least {knowledge.load().drivers.min_driver('8.0.RC3')}" in m.fix and "host driver 23.0.3" in m.fix


def test_platform_mismatch_filled_from_the_text():
    [m] = ex.explain(REAL["platform-mismatch"][0])
    assert m.matched.startswith("requested image's platform (linux/amd64)")
    assert "image built for aarch64" in m.fix and "the image says x86_64" in m.fix
    assert "--arch aarch64" in m.fix


def test_atb_undefined_symbol_names_the_pairings():
    labels = {"io.ascend-build.torch-npu": "2.4.0", "io.ascend-build.cann": "8.0.RC2"}
    [m] = ex.explain(REAL["torch-npu-cann-mismatch"][0], HostInfo(), labels)
    kb = knowledge.load()
    release = kb.releases.torch_npu("2.4.0")
    assert release and f"pairs with CANN {release.cann}" in m.fix
    assert "the image has CANN 8.0.RC2" in m.fix
    paired = [r.version for r in kb.releases.torch_npu_for_cann("8.0.RC2")]
    assert paired and all(v in m.fix for v in paired)


def test_firmware_mismatch_names_the_driver_range_and_firmware():
    host = HostInfo(driver="24.1.rc3", firmware="7.7.0.1.231", driver_fw_ranges=[["7.0.0", "7.5.99"]])
    [m] = ex.explain("Compatibility : NOK", host)
    assert "accepts firmware [7.0.0,7.5.99]" in m.fix and "firmware 7.7.0.1.231" in m.fix
    # without version.info ranges, the knowledge base's observed range is used
    [m] = ex.explain("Compatibility : NOK", HostInfo(driver="24.1.rc1", firmware="7.3.0.1.231"))
    assert "accepts firmware [7.0.0,7.2.99]" in m.fix


def test_no_valid_device_lists_the_host_devices():
    [m] = ex.explain(REAL["no-valid-device"][0], HostInfo(devices=[0, 1]))
    assert "--device /dev/davinci0 --device /dev/davinci1 --device /dev/davinci_manager" in m.fix
    [m] = ex.explain(REAL["no-valid-device"][0])
    assert "--device /dev/davinciN" in m.fix


def test_one_log_with_several_errors_in_order_of_appearance():
    log = (REAL["driver-libs-not-mounted"][0] + "\n" + REAL["dcmi-device-in-use"][0] + "\n"
           + "RuntimeError: not support driver 24.1")
    assert [m.id for m in ex.explain(log)] == ["driver-libs-not-mounted", "dcmi-device-in-use", "driver-too-old"]


def test_8005_and_8020_are_told_apart():
    both = ex.explain("dcmi module initialize failed. ret is -8005\n"
                      "dcmi model initialized failed, because the device is used. ret is -8020")
    assert [m.id for m in both] == ["dcmi-device-in-use", "dcmi-init-failed"] or \
        [m.id for m in both] == ["dcmi-init-failed", "dcmi-device-in-use"]
    assert [m.id for m in ex.explain(REAL["dcmi-device-in-use"][0])] == ["dcmi-device-in-use"]


def test_unknown_placeholder_values_read_unknown():
    assert ex.fill("{host_driver} and {nope}", {}) == "(unknown here) and (unknown here)"
    [m] = ex.explain("dcmi module initialize failed. ret is -8005")
    assert "Host driver (unknown here), firmware (unknown here)" in m.fix


def test_fix_for_is_the_shared_source():
    assert ex.fix_for("driver-too-old", HostInfo(driver="23.0.3"), image_min_driver="24.1.RC3") == \
        ex.explain("not support driver", HostInfo(driver="23.0.3"),
                   {"io.ascend-build.min-driver": "24.1.RC3"})[0].fix
    with pytest.raises(KeyError):
        ex.fix_for("no-such-entry")


def test_format_explanations():
    text = ex.format_explanations(ex.explain("not support driver 24.1", HostInfo(), A3_LABELS))
    lines = text.splitlines()
    assert lines[0] == 'driver-too-old: "not support driver 24.1"'
    assert lines[1].startswith("  cause:  The host's NPU driver is older")
    assert lines[2].startswith("  fix:    Upgrade the host driver") and "24.1.RC3" in lines[2]
    assert lines[3].startswith("  source: ascend-facts.md")
    assert ex.explain("not support driver 24.1")[0].to_dict()["id"] == "driver-too-old"


def _finishes(fn, seconds=30):
    """Run ``fn`` in a thread; True when it returned within ``seconds`` (a hang guard, not a timing)."""
    import threading
    done = []
    worker = threading.Thread(target=lambda: done.append(fn()), daemon=True)
    worker.start()
    worker.join(seconds)
    return bool(done)


def test_a_megabyte_line_is_explained_without_hanging():
    """Patterns such as 'libascend_hal\\.so.*(?:not found|...)' took time growing with the square
    of a line's length (a 120 KB line: 19.6 s); lines are now cut at 4 KB before matching."""
    text = "libascend_hal.so " * 60000  # about 1 MB on one line
    assert _finishes(lambda: ex.explain(text))
    real = "ImportError: libascend_hal.so: cannot open shared object file: No such file or directory"
    assert [m.id for m in ex.explain("x" * 10 + "\n" + real)][:1] == [ex.explain(real)[0].id]


def test_a_long_run_of_brackets_in_a_version_file_is_read_without_hanging():
    from builder.node import host
    assert _finishes(lambda: host._RANGE.findall("[" * 500000))


def test_dcmi_return_codes_mean_what_the_dcmi_reference_says():
    """DCMI's return-code table: -8005 internal error, -8002 permission error, -8020 resource occupied."""
    [m8005] = ex.explain("dcmi module initialize failed. ret is -8005")
    assert m8005.id == "dcmi-init-failed" and "-8005 is DCMI_ERR_CODE_INNER_ERR, an internal error" in m8005.cause
    [m8002] = ex.explain("dcmi model initialized failed. ret is -8002")
    assert m8002.id == "dcmi-init-failed" and "-8002 is" in m8002.cause and "permission error" in m8002.cause
    assert "for -8002 run as root or as a member of the HwHiAiUser group" in m8002.fix
    [m8020] = ex.explain("dcmi model initialized failed, because the device is used. ret is -8020")
    assert m8020.id == "dcmi-device-in-use" and m8020.cause.startswith("-8020 is DCMI_ERR_CODE_RESOURCE_OCCUPIED")
    assert "api_177" in m8005.source and "api_177" in m8020.source


def test_failed_to_infer_device_type_lists_every_failed_torch_npu_import():
    [m] = ex.explain("RuntimeError: Failed to infer device type, please set the environment variable "
                     "`VLLM_LOGGING_LEVEL=DEBUG` to turn on verbose logging to help debug the issue.")
    assert m.id == "cann-env-not-set"
    # not only set_env.sh: any failed import of torch_npu ends in this message
    for cause in ("failed to import torch_npu, for any reason", "set_env.sh", "libascend_hal.so",
                  "a torch other than the one torch_npu was built for", "undefined symbol"):
        assert cause in m.cause, cause
    assert m.fix.startswith('Run `python -c "import torch_npu"` in the same shell to see the real error.')
    assert "vllm/config/device.py" in m.source
# --- the journey of issue 26: codes `explain` did not know, and `--list` -------------------


def test_the_codes_a_first_day_met_are_explained_with_a_source():
    log = "\n".join([REAL["hccl-socket-timeout"][0], REAL["hccl-resource-unavailable"][0],
                     REAL["npu-out-of-memory"][0], "EZ9999: Inner Error!",
                     "EH9999: [PID: 56178] 2025-07-30-06:16:22.730.302 wait for compute device to finish failed, "
                     "runtime result = 507018."])
    found = ex.explain(log)
    assert [m.id for m in found] == ["hccl-socket-timeout", "hccl-resource-unavailable", "npu-out-of-memory",
                                     "cann-inner-error", "aicpu-exception"]
    assert all(m.source and m.cause and m.fix for m in found)


def test_an_hccl_code_and_a_cann_module_are_named_in_the_fix():
    [m] = ex.explain(REAL["hccl-function-error"][0])
    assert m.fix.startswith("HcclResult 15 is in the list above") and "15 runtime API call failed" in m.cause
    [m] = ex.explain("EE9999: Inner Error!")
    assert m.fix.startswith("Module E:") and "E runtime" in m.cause


def explain_cli(*args):
    import subprocess
    import sys
    from pathlib import Path
    cli = str(Path(sys.executable).with_name("ascend-build"))
    return subprocess.run([cli, "explain", *args], capture_output=True, text=True, timeout=120)


def test_explain_list_names_every_known_error_with_its_source():
    text = explain_cli("--list")
    assert text.returncode == 0, text.stderr
    ids = [e.id for e in ex.table()]
    assert [line.split()[0] for line in text.stdout.splitlines()[:len(ids)]] == ids
    assert f"{len(ids)} known errors" in text.stdout
    data = json.loads(explain_cli("--list", "--json").stdout)
    assert [d["id"] for d in data] == ids and all(d["source"] and d["patterns"] for d in data)
    assert "EI0006" in next(d for d in data if d["id"] == "hccl-socket-timeout")["source"]


def test_explain_without_text_or_list_is_a_usage_error():
    done = explain_cli()
    assert done.returncode == 2 and "explain needs the error text (or --list)" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_miss_says_how_many_errors_are_known_and_points_at_the_list(tmp_path):
    done = explain_cli("aclrtDoSomething failed: an error no table holds", "--root", str(tmp_path))
    assert done.returncode == 1 and done.stdout == ""
    assert f"no known Ascend error in that text ({len(ex.table())} errors are known)" in done.stderr
    assert "next: `ascend-build explain --list` shows every one" in done.stderr


# --- issue 32: the ACL and E3 codes of device set-up, context, memory and the OPP --------------


def test_a_device_that_does_not_start_because_its_opp_did_not_verify_names_both():
    """The log of vllm-ascend#4284: SetDevice fails with 507033, and E30006 says why."""
    log = ("Initialize:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:152 NPU function error: "
           "c10_npu::SetDevice(device_id_), error code is 507033\n"
           "[ERROR] 2025-11-19-11:14:58 (PID:356, Device:0, RankID:-1) ERR00100 PTA call acl api failed\n"
           "[Error]: Failed to start the device. \n"
           "E30006: 2025-11-19-11:14:58.516.606 Failed to verify the OPP\n")
    found = ex.explain(log)
    assert [m.id for m in found] == ["device-setup-failed", "opp-verify-failed"]
    setup, opp = found
    assert "ACL_ERROR_RT_DEV_SETUP_ERROR" in setup.cause and "rt_error_codes.h" in setup.source
    assert "Install the correct OPP" in opp.fix and "error_code.json" in opp.source


def test_107002_is_a_missing_context_and_says_to_set_the_device():
    [m] = ex.explain(REAL["context-null"][0])
    assert "ACL_ERROR_RT_CONTEXT_NULL" in m.cause and "torch.npu.set_device" in m.fix
    assert "NPUErrorCodes.h" in m.source


def test_a_bare_number_is_not_taken_for_an_acl_code_without_its_words():
    """Codes that also read as ordinary numbers match only where a log prints them as codes."""
    assert ex.explain("trained 200000 steps in 500004 ms with 207006 samples") == []
