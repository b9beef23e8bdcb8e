"""Packages found, never listed: asymspec_vl and vllm_patches with every subpackage, and the fixed top-level folders
captioners/, evals/ and demo/ installed under the asymspec_vl namespace (their generic names never collide with
other distributions). Everything else about the distribution is in pyproject.toml."""

from setuptools import find_packages, setup

NAMESPACED = {
    "captioners": "asymspec_vl.captioners",
    "evals": "asymspec_vl.evals",
    "demo": "asymspec_vl.demo",
}

packages = find_packages(
    include=["asymspec_vl", "asymspec_vl.*", "vllm_patches", "vllm_patches.*"]
)
for folder, name in NAMESPACED.items():
    packages += [
        name + sub.removeprefix(folder)
        for sub in find_packages(include=[folder, folder + ".*"])
    ]

setup(
    packages=packages, package_dir={name: folder for folder, name in NAMESPACED.items()}
)
