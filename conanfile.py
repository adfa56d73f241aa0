"""Conan 2 recipe for meld, a header-only C++20 library.

    conan create . --build=missing           # package it (runs test_package/)
    [requires] meld/0.1.0                     # in a consumer's conanfile.txt

scripts/check-conan.sh creates it offline, with the system's xsimd as a platform requirement.
"""

import os
import re

from conan import ConanFile
from conan.tools.build import check_min_cppstd
from conan.tools.files import copy, load
from conan.tools.layout import basic_layout

required_conan_version = ">=2.0"


class MeldConan(ConanFile):
    name = "meld"
    description = ("Header-only C++20 tensors with fused expression templates, and parallelism "
                   "(threads, MPI, NCCL)")
    license = "Apache-2.0"
    topics = ("tensor", "expression-templates", "simd", "header-only", "deep-learning")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    exports_sources = "include/*", "LICENSE"
    no_copy_source = True

    def set_version(self):
        # The one source of the version: include/meld/version.hpp.
        text = load(self, os.path.join(self.recipe_folder, "include", "meld", "version.hpp"))
        parts = [re.search(rf"#define MELD_VERSION_{p} (\d+)", text).group(1)
                 for p in ("MAJOR", "MINOR", "PATCH")]
        self.version = ".".join(parts)

    def layout(self):
        basic_layout(self, src_folder=".")

    def requirements(self):
        # meld builds against xsimd 8.1 and every later release so far.
        self.requires("xsimd/[>=8.1 <15]")

    def package_id(self):
        self.info.clear()

    def validate(self):
        check_min_cppstd(self, 20)

    def package(self):
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))
        copy(self, "*.hpp", os.path.join(self.source_folder, "include"),
             os.path.join(self.package_folder, "include"))

    def package_info(self):
        # find_package(meld CONFIG) and the target meld::meld, as with meld's own CMake package.
        self.cpp_info.set_property("cmake_file_name", "meld")
        self.cpp_info.set_property("cmake_target_name", "meld::meld")
        self.cpp_info.set_property("pkg_config_name", "meld")
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []
        self.cpp_info.requires = ["xsimd::xsimd"]
        if self.settings.os in ("Linux", "FreeBSD"):
            self.cpp_info.system_libs = ["pthread"]
