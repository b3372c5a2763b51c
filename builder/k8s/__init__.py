"""Kubernetes manifests for the validated image that fits a pool of NPU nodes.

``pool`` reads the nodes (``kubectl get nodes -o json``, or this host's probe) into the facts
the choice needs; ``pod`` writes the Pod template every manifest shares (digest, NPU resource,
node affinity, driver mounts, ``/dev/shm``, HCCL's environment, the driver guard); ``job`` and
``volcano`` wrap it as a ``batch/v1`` Job or a Volcano Job; ``prepull`` pulls the image onto the nodes
the job's affinity admits (a DaemonSet, or an OpenKruise ImagePullJob); ``render`` prints YAML.
"""
