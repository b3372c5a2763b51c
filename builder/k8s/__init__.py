"""Kubernetes manifests for the validated image that fits a pool of NPU nodes.

``pool`` reads the nodes (``kubectl get nodes -o json``, or this host's probe) into the facts
the choice needs; ``pod`` writes the Pod template every manifest shares (digest, NPU resource,
node affinity, the driver mounts ``mounts`` chooses per chip and job shape, ``/dev/shm``, the
driver guard); ``launcher`` says what the command's launcher reads to find the other pods;
``job``, ``volcano`` and ``ascendjob`` wrap it as a ``batch/v1`` Job, a Volcano Job or the
Ascend Operator's AscendJob; ``prepull`` pulls the image onto the nodes the job's affinity admits
(a DaemonSet, or an OpenKruise ImagePullJob); ``manifest_yaml`` prints YAML.
"""
