# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""MIG profile names: parse, normalise, and derive config and resource names.

Grammar as go-nvlib/mig-parted accept it: ``[<C>c.]<G>g.<GB>gb[+attr[,attr]|-attr]`` with attributes
``me``, ``me.all``, ``gfx`` (NVIDIA/go-nvlib pkg/nvlib/device/mig_profile.go).
Config names replace ``+`` by ``.`` (NVIDIA/mig-parted pkg/mig/builder/builder.go normalizeProfileName) and so do
device-plugin resource names (``nvidia.com/mig-1g.10gb.me``, NVIDIA/k8s-device-plugin internal/rm/rm.go).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import math
import re
import reprlib

from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.k8s.gpu_labels import RESOURCE_MIG_PREFIX
from ansible_collections.gpufleet.gpu_operator.plugins.module_utils.mig.errors import ProfileNameError

# The largest count of one profile a config, a module option or a label may give for one GPU. No NVIDIA GPU holds
# more than 7 GPU instances (MIG user guide, supported profiles); a larger count is still planned (and found
# infeasible, with alternatives), up to this bound, past which the count can only be a mistake and would make
# the placement search grow with it.
MAX_PROFILE_COUNT = 64

ATTRIBUTES = ("me.all", "me", "gfx")  # longest first so "me.all" wins over "me"

_PROFILE_RE = re.compile(
    r"^(?:(?P<c>[1-9][0-9]*)c\.)?(?P<g>[1-9][0-9]*)g\.(?P<gb>[1-9][0-9]*)gb"
    r"(?:\+(?P<attrs>[a-z.,]+)|-(?P<neg>[a-z.,]+))?$"
)

Profile = collections.namedtuple("Profile", ["c", "g", "gb", "attrs", "negattrs"])


def _split_attrs(text, original):
    attrs = tuple(a for a in text.split(",")) if text else ()
    if len(set(attrs)) != len(attrs):
        raise ProfileNameError("'%s' is not a MIG profile name: an attribute is repeated" % original)
    for attr in attrs:
        if attr not in ATTRIBUTES:
            raise ProfileNameError(
                "'%s' is not a MIG profile name: unknown attribute '%s' (known: %s)"
                % (original, attr, ", ".join(sorted(ATTRIBUTES)))
            )
    return attrs


def parse_profile(name):
    """Parse ``name`` into Profile(c, g, gb, attrs, negattrs); c == g when no ``<C>c.`` prefix. As strict as
    go-nvlib about the string itself (no surrounding spaces, no repeated attribute); stricter where no GPU has the
    profile (unknown attributes, C > G, zero or zero-padded numbers)."""
    if not isinstance(name, str):
        raise ProfileNameError("%r is not a MIG profile name: expected a string like 1g.10gb" % (name,))
    match = _PROFILE_RE.match(name)
    if not match:
        raise ProfileNameError(
            "'%s' is not a MIG profile name: expected [<C>c.]<G>g.<GB>gb[+me|+me.all|+gfx|-me], e.g. 1g.10gb"
            % name
        )
    g = int(match.group("g"))
    c = int(match.group("c")) if match.group("c") else g
    if c > g:
        raise ProfileNameError("'%s' is not a MIG profile name: %d compute slices exceed %d GPU slices" % (name, c, g))
    attrs = _split_attrs(match.group("attrs"), name)
    negattrs = _split_attrs(match.group("neg"), name)
    return Profile(c, g, int(match.group("gb")), attrs, negattrs)


# Compute-instance slice counts a GPU instance of G slices offers (NVML_COMPUTE_INSTANCE_PROFILE_*; the MIG user
# guide's CI profile lists, e.g. 1c.7g, 2c.7g, 3c.7g, 4c.7g and 7g on a 7g instance). A profile ``<C>c.<G>g.<GB>gb``
# is a GPU instance of ``<G>g.<GB>gb`` holding one compute instance of C slices, as mig-parted applies it
# (NVIDIA/mig-parted pkg/mig/config/config.go: CreateGpuInstance, then CreateComputeInstance of the CI profile).
COMPUTE_SLICES = {1: (1,), 2: (1, 2), 3: (1, 2, 3), 4: (1, 2, 4), 7: (1, 2, 3, 4, 7)}


def count_problem(count):
    """Why ``count`` cannot be a per-GPU instance count of one profile, or None."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        return "count must be a whole number >= 0, got %s" % short_repr(count)
    if count > MAX_PROFILE_COUNT:
        return "count %d is more than any GPU holds (at most %d accepted; NVIDIA GPUs hold at most 7 GPU instances)" \
            % (count, MAX_PROFILE_COUNT)
    return None


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict, _SHORT.maxstring, _SHORT.maxother = 2, 4, 4, 60, 60


def short_repr(value):
    """A user-given value as an error message shows it: bounded in size and depth, so a YAML alias bomb or a huge
    string in a config is named by a few characters, never rendered whole."""
    return _SHORT.repr(value)


def compute_slice_options(g):
    """Compute-instance slice counts of a G-slice GPU instance, smallest first (G alone when not listed)."""
    return COMPUTE_SLICES.get(g, (g,))


def gpu_instance_profile(name):
    """The GPU-instance profile a (compute-instance) profile lives in: ``1c.3g.40gb`` -> ``3g.40gb``."""
    profile = parse_profile(name)
    return format_profile(profile._replace(c=profile.g))


def format_profile(profile):
    """Canonical string for a Profile (inverse of parse_profile)."""
    text = "%dg.%dgb" % (profile.g, profile.gb)
    if profile.c != profile.g:
        text = "%dc.%s" % (profile.c, text)
    if profile.attrs:
        text += "+" + ",".join(profile.attrs)
    elif profile.negattrs:
        text += "-" + ",".join(profile.negattrs)
    return text


def canonical_profile_name(text):
    """Accept the forms users write and return the profile name mig-parted expects.

    Takes ``1g.10gb+me``, the config/resource form ``1g.10gb.me``, ``nvidia.com/mig-1g.10gb.me``,
    ``MIG 1g.10gb+me`` (NVML's v2 name) and ``all-1g.10gb.me``; raises ProfileNameError otherwise.
    """
    if not isinstance(text, str):
        raise ProfileNameError("%r is not a MIG profile name: expected a string like 1g.10gb" % (text,))
    name = text.strip()
    for prefix in (RESOURCE_MIG_PREFIX, "MIG ", "all-"):
        if name.startswith(prefix):
            name = name[len(prefix):]
    match = re.match(r"^((?:[0-9]+c\.)?[0-9]+g\.[0-9]+gb)\.(me\.all|me|gfx)$", name)
    if match:
        name = "%s+%s" % (match.group(1), match.group(2))
    try:
        return format_profile(parse_profile(name))
    except ProfileNameError:
        raise ProfileNameError(
            "'%s' is not a MIG profile name: expected [<C>c.]<G>g.<GB>gb[+me|+me.all|+gfx|-me], e.g. 1g.10gb" % text
        )


def profile_to_config_suffix(name):
    """``1g.5gb+me`` -> ``1g.5gb.me``; ``-me`` is kept (static config uses ``all-1g.24gb-me``)."""
    return format_profile(parse_profile(name)).replace("+", ".")


def config_name_for(name):
    """Named config that fills every GPU with ``name``: ``all-1g.5gb.me``."""
    return "all-" + profile_to_config_suffix(name)


def resource_name(name):
    """Extended resource the device plugin advertises under the mixed strategy."""
    return RESOURCE_MIG_PREFIX + profile_to_config_suffix(name)


def is_base_profile(name):
    """True for a GPU-instance profile with no attributes and C == G (used by all-balanced)."""
    profile = parse_profile(name)
    return profile.c == profile.g and not profile.attrs and not profile.negattrs


def name_from_nvml(memory_mb, slice_count, total_memory_mb, suffix=""):
    """Profile name from NVML numbers, as go-nvlib derives it when no v2 name is available.

    GB = round(ceil(mem/total*8)/8 * ceil(total_GB)) (NVIDIA/go-nvlib mig_profile.go getMigMemorySizeGB).
    """
    if not total_memory_mb or not memory_mb:
        raise ProfileNameError("cannot name a profile of %s MB on a GPU of %s MB" % (memory_mb, total_memory_mb))
    fraction = math.ceil(float(memory_mb) / float(total_memory_mb) * 8.0) / 8.0
    total_gb = math.ceil(float(total_memory_mb) / 1024.0)
    gb = int(math.floor(fraction * total_gb + 0.5))
    return "%dg.%dgb%s" % (slice_count, gb, suffix)
