"""The base validation pod manifest(s), hydrated per node-test pair by ``cluster_doctor.kube.podspec``.

A package only so the manifests ship as package data of the ``cluster_doctor`` distribution
(``cluster_doctor.pod_templates``); it holds no code.
"""
