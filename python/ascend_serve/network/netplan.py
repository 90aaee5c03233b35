"""The NPU device-NIC address plan of a fleet, checked fleet-wide before any host changes.

Each host of the fleet (inventory order) lists its devices' addresses explicitly, or has them
computed. Chip families: 910B (A2) has 8 devices, 910C (A3) 16 devices (two dies per NPU, each
die a device and a rank), the old 910 8 devices.

The plan's ``layout`` says how the devices of a host spread over the plan's subnets; device
``d`` always uses subnet ``d % len(subnets)``:

* ``single`` (default for 910B): one subnet for every device of every host. The vendor's
  Ascend Deployer HCCN policy for Atlas 800T A2 / 900 A2 PoD; real A2 samples in
  ``tests/data/corpus`` (11.12.165.0/24 over 4 hosts, 10.10.100.0/24, 29.1.0.0/16).
* ``four_plane`` (default, and the only layout, for the old 910): four subnets; devices
  0/4, 1/5, 2/6 and 3/7 share one each (Deployer policy for Atlas 800 9000/9010, 900 PoD; the
  CANN 5.0.4 install guide's example plan; the ModelArts 4-plane ``-ip -g`` sample).
* ``dual_plane`` (default for 910C, and 910C only): two subnets, even devices (die 0 of each
  NPU) in the first, odd
  devices (die 1) in the second. The vendor (Deployer, Atlas 900 A3 SuperPoD / 800I A3) says
  the two dies of one NPU MUST be in different subnets, or ``hccn_tool`` ping fails. That die 0
  is the even device id and die 1 the odd one, and that all even dies share one plane, is
  inferred (hicann/hixl: devices 0/1, 2/3, ... are the dies of one card; xLLM's real A3 rank
  table has device 0 on 192.24.2.x and device 15 on 192.24.3.x), not stated by the vendor.
  So an A3 plan never uses ``single``: it is refused with that rule.
* ``rail``: one subnet per device position (``len(subnets)`` = devices per host); device ``d`` of
  every host is in subnet ``d``: the same-numbered cards of all servers meet on one switch plane
  (hicann/hccl Pipeline.md). Seen in real data (the 910A ``-ip -g`` fixtures: device 0 on
  192.161.200.x, device 1 on 192.161.201.x); the vendor documents no such rule for A2.

Computed address of device ``d`` on a host with index ``i`` (its ``index``, else its position in
the inventory), with ``subnets`` the number of subnets of the layout::

    per_host = devices / subnets     # addresses a host takes in each subnet: single A2 8, A3 16,
                                     # four_plane 2, dual_plane 8, rail 1
    ordinal  = offset + i * per_host + d // subnets
    address  = the ordinal-th (from 0) usable address of the device's subnet

Usable addresses run from the network address + 1 to the broadcast address - 1, skipping that
subnet's gateway and detect (netdetect) address. An A2 fleet on 192.168.100.0/24 with gateway
192.168.100.1 therefore gets 192.168.100.2-9 on host 0 and 192.168.100.10-17 on host 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from ipaddress import IPv4Address, IPv4Network
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

ChipFamily = Literal["910", "910B", "910C"]
Layout = Literal["single", "four_plane", "dual_plane", "rail"]

DEVICES: dict[str, int] = {"910": 8, "910B": 8, "910C": 16}
# Subnets of each chip family's default layout (four_plane for the old 910, else single).
SUBNETS: dict[str, int] = {"910": 4, "910B": 1, "910C": 1}
LAYOUTS: tuple[str, ...] = ("single", "four_plane", "dual_plane", "rail")
_ALIASES = {"A2": "910B", "A3": "910C"}


class NetPlanError(ValueError):
    """The fleet's device network description is inconsistent; ``problems`` lists every issue."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(
            f"device IP plan: {problems[0]}" if len(problems) == 1
            else f"device IP plan has {len(problems)} problems:\n"
            + "\n".join(f"- {p}" for p in problems)
        )


def input_problems(exc: ValidationError) -> list[str]:
    """One readable line per pydantic error: ``hosts.1.chip: Input should be ...``."""
    return [
        f"{'.'.join(str(part) for part in err['loc']) or 'input'}: {err['msg']}"
        for err in exc.errors()
    ]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SubnetSpec(_Model):
    """One device subnet; ``gateway`` and ``netdetect`` are never handed to a device."""

    cidr: IPv4Network
    gateway: IPv4Address | None = None
    netdetect: IPv4Address | None = None

    @field_validator("cidr")
    @classmethod
    def _big_enough(cls, value: IPv4Network) -> IPv4Network:
        if value.prefixlen > 30:
            raise ValueError(f"{value} is too small for device addresses (at most /30)")
        return value

    def reserved(self) -> list[IPv4Address]:
        return sorted({a for a in (self.gateway, self.netdetect) if a is not None})


class HostSpec(_Model):
    name: str = Field(min_length=1)
    chip: ChipFamily
    index: int | None = Field(default=None, ge=0)
    addresses: list[IPv4Address] | None = None
    tls: bool | None = None

    @field_validator("chip", mode="before")
    @classmethod
    def _chip_name(cls, value: Any) -> Any:
        # YAML reads ``chip: 910`` as an integer; A2/A3 are the server generation names.
        if isinstance(value, (int, str)):
            name = str(value).strip().upper()
            return _ALIASES.get(name, name)
        return value


class FleetSpec(_Model):
    subnets: list[SubnetSpec] = Field(min_length=1)
    hosts: list[HostSpec] = Field(min_length=1)
    offset: int = Field(default=0, ge=0)
    tls: bool = False
    # None: the chip family's default (four_plane for the old 910, dual_plane for a 910C fleet,
    # single otherwise).
    layout: Layout | None = None

    @field_validator("subnets", mode="before")
    @classmethod
    def _subnet_shorthand(cls, value: Any) -> Any:
        # "10.0.0.0/24" or a list of such strings stand for {cidr: ...}.
        items = [value] if isinstance(value, str) else value
        if isinstance(items, list):
            return [{"cidr": i} if isinstance(i, str) else i for i in items]
        return value


class DevicePlan(_Model):
    device: int
    address: str
    netmask: str
    gateway: str | None = None
    netdetect: str | None = None


class HostPlan(_Model):
    name: str
    chip: ChipFamily
    index: int
    tls: bool
    devices: list[DevicePlan]


class NetPlan(_Model):
    hosts: dict[str, HostPlan]  # inventory order
    layout: Layout = "single"


def parse_fleet(data: Mapping[str, Any]) -> FleetSpec:
    try:
        return FleetSpec.model_validate(data)
    except ValidationError as exc:
        raise NetPlanError(input_problems(exc)) from exc


def layout_of(spec: FleetSpec) -> Layout:
    """The plan's layout: as given, else four_plane for old 910 hosts and single otherwise."""
    if spec.layout is not None:
        return spec.layout
    chips = {h.chip for h in spec.hosts}
    if "910" in chips:
        return "four_plane"
    return "dual_plane" if chips == {"910C"} else "single"


def _layout_problems(spec: FleetSpec, layout: str) -> list[str]:
    chips = {h.chip for h in spec.hosts}
    if "910" in chips and len(chips) > 1:
        return [
            "old 910 hosts (four subnets) cannot share a plan with "
            f"{', '.join(sorted(chips - {'910'}))} hosts (one subnet); plan them separately"
        ]
    got = len(spec.subnets)
    if layout == "four_plane":
        if chips != {"910"}:
            return [f"layout four_plane is the old 910's; this plan has "
                    f"{', '.join(sorted(chips))} hosts (use single, dual_plane or rail)"]
        return [] if got == 4 else [
            "old 910 needs 4 subnets (devices 0/4, 1/5, 2/6, 3/7 share one each)"]
    if layout == "single":
        if "910" in chips:
            return ["the old 910 uses four_plane or rail, not a single subnet"]
        if any(h.chip == "910C" and h.addresses is None for h in spec.hosts):
            return ["910C (A3) hosts cannot share one subnet: the two dies of one NPU must be on "
                    "different subnets or hccn_tool ping fails (Ascend Deployer HCCN policy for "
                    "Atlas 900 A3 SuperPoD / 800I A3); use layout dual_plane (2 subnets) or rail"]
        return [] if got == 1 else [
            f"910B puts all devices of a host in one subnet; got {got}"]
    if layout == "dual_plane":
        if chips != {"910C"}:
            return [f"layout dual_plane is for 910C (A3: the two dies of one NPU on different "
                    f"subnets); this plan has {', '.join(sorted(chips - {'910C'}))} hosts"]
        return [] if got == 2 else [
            "layout dual_plane needs 2 subnets (even devices, die 0 of each NPU, in the "
            f"first; odd devices, die 1, in the second); got {got}"]
    counts = {DEVICES[c] for c in chips}  # rail
    if len(counts) > 1:
        return ["layout rail needs the same number of devices on every host; this plan mixes "
                + " and ".join(f"{c} ({DEVICES[c]})" for c in sorted(chips))]
    wanted = counts.pop()
    return [] if got == wanted else [
        f"layout rail needs one subnet per device position: {wanted} for "
        f"{', '.join(sorted(chips))}; got {got}"]


def _fleet_problems(spec: FleetSpec) -> list[str]:
    problems: list[str] = []
    seen: set[str] = set()
    for host in spec.hosts:
        if host.name in seen:
            problems.append(f"host {host.name} is listed twice")
        seen.add(host.name)
    problems += _layout_problems(spec, layout_of(spec))
    for n, subnet in enumerate(spec.subnets):
        net = subnet.cidr
        for other in spec.subnets[n + 1:]:
            if net.overlaps(other.cidr):
                problems.append(f"subnets {net} and {other.cidr} overlap")
        for role, address in (("gateway", subnet.gateway), ("netdetect", subnet.netdetect)):
            if address is None:
                continue
            if address not in net:
                problems.append(f"{role} {address} is outside its subnet {net}")
            elif address in (net.network_address, net.broadcast_address):
                problems.append(f"{role} {address} is the network or broadcast address of {net}")
    return problems


def _nth_usable(subnet: SubnetSpec, ordinal: int) -> IPv4Address | None:
    """The ordinal-th usable address of the subnet, or None past its end."""
    net = subnet.cidr
    candidate = int(net.network_address) + 1 + ordinal
    for skip in subnet.reserved():  # ascending: each one at or below the candidate pushes it up
        if int(skip) <= candidate:
            candidate += 1
    return IPv4Address(candidate) if candidate < int(net.broadcast_address) else None


def _computed(spec: FleetSpec, host: HostSpec, index: int) -> tuple[list[IPv4Address], str | None]:
    subnets = len(spec.subnets)  # the layout's count, checked by _layout_problems
    per_host = DEVICES[host.chip] // subnets
    addresses: list[IPv4Address] = []
    for device in range(DEVICES[host.chip]):
        subnet = spec.subnets[device % subnets]
        ordinal = spec.offset + index * per_host + device // subnets
        address = _nth_usable(subnet, ordinal)
        if address is None:
            usable = subnet.cidr.num_addresses - 2 - len(subnet.reserved())
            return addresses, (
                f"host {host.name} device {device}: subnet {subnet.cidr} is too small; the device "
                f"needs usable address #{ordinal} (offset {spec.offset} + index {index} x "
                f"{per_host} + {device // subnets}) and the subnet has {usable}; use a larger "
                "subnet or explicit addresses"
            )
        addresses.append(address)
    return addresses, None


def _explicit_problems(spec: FleetSpec, host: HostSpec, addresses: list[IPv4Address]) -> list[str]:
    count = DEVICES[host.chip]
    if len(addresses) != count:
        return [
            f"host {host.name} ({host.chip}) lists {len(addresses)} addresses; a {host.chip} "
            f"host has {count} devices (0-{count - 1})"
        ]
    problems = []
    for device, address in enumerate(addresses):
        net = spec.subnets[device % len(spec.subnets)].cidr
        label = f"host {host.name} device {device}: {address}"
        if address not in net:
            problems.append(f"{label} is outside its subnet {net}")
        elif address in (net.network_address, net.broadcast_address):
            problems.append(f"{label} is the network or broadcast address of {net}")
    return problems


def plan(fleet: FleetSpec | Mapping[str, Any]) -> NetPlan:
    """Every host's device addresses; raises NetPlanError naming every problem found."""
    spec = fleet if isinstance(fleet, FleetSpec) else parse_fleet(fleet)
    problems = _fleet_problems(spec)
    if problems:
        raise NetPlanError(problems)
    reserved = {
        address: f"the {role} of {s.cidr}"
        for s in spec.subnets
        for role, address in (("netdetect", s.netdetect), ("gateway", s.gateway))
        if address is not None
    }
    owners: dict[IPv4Address, str] = {}
    hosts: dict[str, HostPlan] = {}
    for position, host in enumerate(spec.hosts):
        index = position if host.index is None else host.index
        if host.addresses is not None:
            addresses = host.addresses
            host_problems = _explicit_problems(spec, host, addresses)
            problems.extend(host_problems)
            if host_problems:
                continue
        else:
            addresses, too_small = _computed(spec, host, index)
            if too_small:
                problems.append(too_small)
        devices = []
        for device, address in enumerate(addresses):
            label = f"host {host.name} device {device}"
            if address in owners:
                problems.append(f"{address} is assigned to both {owners[address]} and {label}")
            owners.setdefault(address, label)
            if address in reserved:
                problems.append(f"{label}: {address} is {reserved[address]}")
            subnet = spec.subnets[device % len(spec.subnets)]
            devices.append(DevicePlan(
                device=device,
                address=str(address),
                netmask=str(subnet.cidr.netmask),
                gateway=None if subnet.gateway is None else str(subnet.gateway),
                netdetect=None if subnet.netdetect is None else str(subnet.netdetect),
            ))
        tls = spec.tls if host.tls is None else host.tls
        hosts[host.name] = HostPlan(name=host.name, chip=host.chip, index=index, tls=tls,
                                    devices=devices)
    if problems:
        raise NetPlanError(problems)
    return NetPlan(hosts=hosts, layout=layout_of(spec))


def hccn_conf(host: HostPlan | Mapping[str, Any]) -> str:
    """``/etc/hccn.conf`` for one host: ``key_<device>=value`` lines, device by device."""
    try:
        host_plan = host if isinstance(host, HostPlan) else HostPlan.model_validate(host)
    except ValidationError as exc:
        raise NetPlanError(input_problems(exc)) from exc
    lines: list[str] = []
    for dev in sorted(host_plan.devices, key=lambda d: d.device):
        n = dev.device
        lines += [f"address_{n}={dev.address}", f"netmask_{n}={dev.netmask}"]
        if dev.netdetect:
            lines.append(f"netdetect_{n}={dev.netdetect}")
        if dev.gateway:
            lines.append(f"gateway_{n}={dev.gateway}")
        lines += [f"send_arp_status_{n}=1", f"tls_enable_{n}={int(host_plan.tls)}"]
    return "\n".join(lines) + "\n"
