"""The NPU device-NIC address plan of a fleet, checked fleet-wide before any host changes.

Each host of the fleet (inventory order) lists its devices' addresses explicitly, or has them
computed. Chip families: 910B (A2) has 8 devices in one subnet, 910C (A3) 16 devices in one
subnet, the old 910 has 8 devices in four subnets pairing devices 0/4, 1/5, 2/6 and 3/7 (device
``d`` uses subnet ``d % 4``).

Computed address of device ``d`` on a host with index ``i`` (its ``index``, else its position in
the inventory)::

    per_host = devices / subnets     # addresses a host takes in each subnet: A2 8, A3 16, 910 2
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

DEVICES: dict[str, int] = {"910": 8, "910B": 8, "910C": 16}
SUBNETS: dict[str, int] = {"910": 4, "910B": 1, "910C": 1}
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


def parse_fleet(data: Mapping[str, Any]) -> FleetSpec:
    try:
        return FleetSpec.model_validate(data)
    except ValidationError as exc:
        raise NetPlanError(input_problems(exc)) from exc


def _fleet_problems(spec: FleetSpec) -> list[str]:
    problems: list[str] = []
    seen: set[str] = set()
    for host in spec.hosts:
        if host.name in seen:
            problems.append(f"host {host.name} is listed twice")
        seen.add(host.name)
    chips = {h.chip for h in spec.hosts}
    wanted = 4 if "910" in chips else 1
    if "910" in chips and len(chips) > 1:
        problems.append(
            "old 910 hosts (four subnets) cannot share a plan with "
            f"{', '.join(sorted(chips - {'910'}))} hosts (one subnet); plan them separately"
        )
    elif len(spec.subnets) != wanted:
        problems.append(
            "old 910 needs 4 subnets (devices 0/4, 1/5, 2/6, 3/7 share one each)" if wanted == 4
            else f"910B/910C put all devices of a host in one subnet; got {len(spec.subnets)}"
        )
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
    subnets = SUBNETS[host.chip]
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
        net = spec.subnets[device % SUBNETS[host.chip]].cidr
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
            subnet = spec.subnets[device % SUBNETS[host.chip]]
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
    return NetPlan(hosts=hosts)


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
