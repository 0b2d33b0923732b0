package docker

// Anti-spoofing on the sandbox bridge.
//
// A process with NET_ADMIN in a sandbox's network namespace (the enforcer has it; a
// hole in the enforcer would hand it to the workload) could give the sandbox's interface
// a neighbour's IP and MAC and answer ARP for them: the host would then send the
// neighbour's agent calls to it. The host side of each sandbox's veth is therefore
// pinned to the addresses the engine gave it, in an nftables table of family bridge that
// the runtime owns, one per sandbox network:
//
//	table bridge sandgate_antispoof_<bridge> {
//		map ports { type ifname : verdict }           # host-side veth → jump port_<veth>
//		chain prerouting { type filter hook prerouting priority -200; iifname vmap @ports }
//		chain port_<veth> {
//			ether saddr != <mac> drop
//			arp htype/ptype/hlen/plen != ethernet/ipv4 drop
//			arp saddr ether != <mac> drop
//			arp saddr ip != <ip> drop
//			ip saddr != <ip> drop
//			ether type { arp, ip } return
//			drop                                      # IPv6, VLAN tags, any other type
//		}
//	}
//
// Every frame a sandbox sends enters the bridge through its veth, so the chain judges it
// before the bridge forwards it to a neighbour or hands it to the host. IPv6 is dropped
// from sandbox ports: sandgate's network has none, and on an operator's network with
// IPv6 the sandboxes speak IPv4 only (docs/security.md).
//
// The addresses come from the engine (the endpoint's IP and MAC), never from the
// sandbox. The port is found from inside the namespace: a veth there whose peer lives in
// another namespace (IFLA_LINK, IFLA_LINK_NETNSID; a process in the sandbox can make no
// such pair, only pairs within its own namespace), and whose peer is a port of the
// network's bridge on this host.
//
// When: a namespace is pinned as soon as it exists, before anything with NET_ADMIN runs
// in it: a spare holder when it is made (holders.go), a workload in its own namespace
// right after its start, before its enforcer starts. A port whose interface is gone (its
// namespace was removed) is dropped by Delete, and at start the runtime pins every
// running or paused sandbox namespace on the network and drops the rest, so a restarted
// gateway keeps the rules of the sandboxes it adopts; the reconciler's helper sweep does
// the same should the table itself be gone (a firewall reload). Several gateways on one
// network share the table: each only adds ports it pins and removes ports whose
// interface is gone, so none removes another's. Close removes the table once no
// container is left on the network, and a runtime's start removes tables whose bridge no
// longer exists.
//
// It needs root on the engine's host, in its network namespace (CAP_NET_ADMIN for the
// table, CAP_SYS_ADMIN to enter a sandbox's namespace): without them New fails, naming
// the setting that turns the protection off (Options.NoAntiSpoof, SANDGATE_ANTISPOOF=off).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/sandgate/sandgate/runtimes"
)

// antiSpoofTablePrefix starts the name of every nftables table (family bridge) the
// runtime owns; the rest is the name of the network's bridge interface.
const antiSpoofTablePrefix = "sandgate_antispoof_"

const (
	antiSpoofMap       = "ports"
	antiSpoofBase      = "prerouting"
	antiSpoofPortChain = "port_"
	// antiSpoofPriority is the bridge family's filter priority (NF_BR_PRI_FILTER_BRIDGED).
	antiSpoofPriority = -200
)

// AntiSpoofTable returns the name of the table that pins the ports of bridge.
func AntiSpoofTable(bridge string) string { return antiSpoofTablePrefix + bridge }

// antiSpoof is the runtime's part of the table: its network's bridge.
type antiSpoof struct {
	bridge string
}

func (a *antiSpoof) table() *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyBridge, Name: AntiSpoofTable(a.bridge)}
}

func (a *antiSpoof) portsMap(t *nftables.Table) *nftables.Set {
	return &nftables.Set{Table: t, Name: antiSpoofMap, IsMap: true, KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict}
}

// errAntiSpoof wraps every failure of New to set up anti-spoofing with the way out.
func errAntiSpoof(err error) error {
	return fmt.Errorf("anti-spoofing on the sandbox bridge: %w (the gateway must run as root on the Docker engine's host, in its network namespace; SANDGATE_ANTISPOOF=off runs without it, letting a sandbox with NET_ADMIN in its namespace take a neighbour's address: docs/security.md)", err)
}

// startAntiSpoof finds the network's bridge, installs the table, pins every running or
// paused sandbox namespace on the network and drops ports whose interface is gone.
func (r *Runtime) startAntiSpoof(ctx context.Context) error {
	res, err := r.cli.NetworkInspect(ctx, r.opts.Network, client.NetworkInspectOptions{})
	if err != nil {
		return errAntiSpoof(fmt.Errorf("inspect network %s: %w", r.opts.Network, err))
	}
	if res.Network.Driver != "bridge" {
		return errAntiSpoof(fmt.Errorf("network %s has driver %q; only bridge networks are pinned", r.opts.Network, res.Network.Driver))
	}
	bridge := res.Network.Options["com.docker.network.bridge.name"]
	if bridge == "" && len(res.Network.ID) >= 12 {
		bridge = "br-" + res.Network.ID[:12]
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", bridge, "bridge")); err != nil {
		return errAntiSpoof(fmt.Errorf("bridge %q of network %s is not an interface of this network namespace: %w", bridge, r.opts.Network, err))
	}
	// Entering a namespace needs CAP_SYS_ADMIN: try it on our own before any sandbox's.
	if _, err := inNetns(fmt.Sprintf("/proc/%d/ns/net", os.Getpid()), func() (int, error) { return 0, nil }); err != nil {
		return errAntiSpoof(err)
	}
	a := &antiSpoof{bridge: bridge}
	removeGoneBridgeTables()
	if err := a.ensureTable(); err != nil {
		return errAntiSpoof(err)
	}
	r.antiSpoof = a
	pinned, dropped, err := r.resyncAntiSpoof(ctx)
	if err != nil {
		return errAntiSpoof(err)
	}
	r.log.Info("anti-spoofing on the sandbox bridge", "table", "bridge "+AntiSpoofTable(bridge), "pinned", pinned, "dropped", dropped)
	return nil
}

// resyncAntiSpoof pins every running or paused sandbox namespace on the network, from
// the engine's state, and drops the ports whose interface is gone. A namespace that
// cannot be pinned is logged as an error and the others are pinned still.
func (r *Runtime) resyncAntiSpoof(ctx context.Context) (pinned, dropped int, err error) {
	list, err := r.cli.ContainerList(ctx, client.ContainerListOptions{
		// Paused too: a sandbox frozen by idle pause sends again once resumed.
		Filters: make(client.Filters).Add("network", r.opts.Network).Add("status", "running", "paused"),
	})
	if err != nil {
		return 0, 0, fmt.Errorf("list containers on %s: %w", r.opts.Network, err)
	}
	for _, c := range list.Items {
		if !ownsSandboxNamespace(c.Labels) {
			continue
		}
		if _, err := r.pinContainer(ctx, c.ID); err != nil {
			r.log.Error("sandbox namespace not pinned to its addresses: it could take a neighbour's", "container", c.Names, "err", err)
			continue
		}
		pinned++
	}
	return pinned, r.antiSpoof.dropGonePorts(), nil
}

// repairAntiSpoof drops the pins of gone ports and, should the table itself be gone (a
// firewall reload that flushed the whole ruleset, an operator's `nft delete`), makes it
// again and pins every sandbox namespace anew. The reconciler's helper sweep calls it.
func (r *Runtime) repairAntiSpoof(ctx context.Context) {
	a := r.antiSpoof
	if a == nil {
		return
	}
	c, err := nftables.New()
	if err != nil {
		return
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyBridge)
	if err != nil {
		return
	}
	name := AntiSpoofTable(a.bridge)
	if slices.ContainsFunc(tables, func(t *nftables.Table) bool { return t.Name == name }) {
		a.dropGonePorts()
		return
	}
	r.log.Warn("the anti-spoofing table is gone; making it again and pinning every sandbox namespace", "table", "bridge "+name)
	if err := a.ensureTable(); err != nil {
		r.log.Error("anti-spoofing table not made again", "table", "bridge "+name, "err", err)
		return
	}
	if pinned, dropped, err := r.resyncAntiSpoof(ctx); err != nil {
		r.log.Error("sandbox namespaces not pinned again", "err", err)
	} else {
		r.log.Info("anti-spoofing table made again", "table", "bridge "+name, "pinned", pinned, "dropped", dropped)
	}
}

// ownsSandboxNamespace reports whether a container on the network, by its labels, holds
// a sandbox's network namespace: a workload in its own, or a namespace holder.
func ownsSandboxNamespace(labels map[string]string) bool {
	switch labels[labelRole] {
	case "":
		return labels[runtimes.LabelID] != ""
	case roleNetns:
		return true
	}
	return false
}

// ensureTable creates the table, its map and its base chain unless they exist.
func (a *antiSpoof) ensureTable() error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("open netlink connection for nftables: %w", err)
	}
	t := c.AddTable(a.table())
	ports := a.portsMap(t)
	if err := c.AddSet(ports, nil); err != nil {
		return fmt.Errorf("queue nftables map: %w", err)
	}
	prio := nftables.ChainPriority(antiSpoofPriority)
	accept := nftables.ChainPolicyAccept
	base := c.AddChain(&nftables.Chain{
		Name: antiSpoofBase, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: &prio, Policy: &accept,
	})
	c.FlushChain(base)
	c.AddRule(&nftables.Rule{Table: t, Chain: base, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Lookup{SourceRegister: 1, SetName: ports.Name, SetID: ports.ID, DestRegister: 0, IsDestRegSet: true},
	}})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("install nftables table bridge %s: %w", AntiSpoofTable(a.bridge), err)
	}
	return nil
}

// pinContainer pins the namespace of a running container on the network. It returns
// the container as inspected for it (nil without anti-spoofing, which inspects nothing),
// so that the create that started it needs no second inspect for its address.
func (r *Runtime) pinContainer(ctx context.Context, id string) (*container.InspectResponse, error) {
	if r.antiSpoof == nil {
		return nil, nil
	}
	res, err := r.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", id, err)
	}
	return &res.Container, r.pin(res.Container)
}

// pin pins the host-side port of a running container's namespace to the IP and MAC the
// engine gave it on the network. Without anti-spoofing it does nothing.
func (r *Runtime) pin(c container.InspectResponse) error {
	a := r.antiSpoof
	if a == nil {
		return nil
	}
	if c.State == nil || c.State.Pid <= 0 {
		return fmt.Errorf("container %s is not running", c.ID)
	}
	var ip netip.Addr
	var mac net.HardwareAddr
	if c.NetworkSettings != nil {
		if ep := c.NetworkSettings.Networks[r.opts.Network]; ep != nil {
			ip, mac = ep.IPAddress.Unmap(), net.HardwareAddr(ep.MacAddress)
		}
	}
	if !ip.Is4() || len(mac) != 6 {
		return fmt.Errorf("container %s has no IPv4 address and MAC on network %s", c.ID, r.opts.Network)
	}
	port, err := a.hostPort(c.State.Pid)
	if err != nil {
		return fmt.Errorf("host-side interface of container %s: %w", c.ID, err)
	}
	if err := a.install(port, ip, mac); err != nil {
		// The table may be gone (removed by hand, or by another gateway's Close on a
		// network it found empty): made again, then the port once more.
		if terr := a.ensureTable(); terr != nil {
			return fmt.Errorf("pin %s to %s %s: %w", port, ip, mac, terr)
		}
		if err := a.install(port, ip, mac); err != nil {
			return fmt.Errorf("pin %s to %s %s: %w", port, ip, mac, err)
		}
	}
	return nil
}

// hostPort returns the name of the bridge port that is the host side of the namespace
// of process pid.
func (a *antiSpoof) hostPort(pid int) (string, error) {
	peers, err := inNetns(fmt.Sprintf("/proc/%d/ns/net", pid), vethPeers)
	if err != nil {
		return "", err
	}
	for _, index := range peers {
		ifc, err := net.InterfaceByIndex(index)
		if err != nil {
			continue
		}
		if a.isPort(ifc.Name) {
			return ifc.Name, nil
		}
	}
	return "", fmt.Errorf("no interface of its namespace is a port of bridge %s", a.bridge)
}

// isPort reports whether interface name is a port of the runtime's bridge.
func (a *antiSpoof) isPort(name string) bool {
	master, err := os.Readlink(filepath.Join("/sys/class/net", name, "master"))
	return err == nil && filepath.Base(master) == a.bridge
}

// inNetns runs f on a thread that has entered the network namespace at nsPath, and
// returns the thread to the caller's namespace afterwards (a thread that cannot return
// ends with its goroutine, never serving other goroutines from the wrong namespace).
func inNetns[T any](nsPath string, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		var zero T
		runtime.LockOSThread()
		own, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{zero, fmt.Errorf("open own network namespace: %w", err)}
			return
		}
		defer own.Close()
		target, err := os.Open(nsPath)
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{zero, fmt.Errorf("open network namespace: %w", err)}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- result{zero, fmt.Errorf("enter network namespace %s: %w", nsPath, err)}
			return
		}
		v, err := f()
		if unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- result{v, err}
	}()
	res := <-done
	return res.v, res.err
}

// vethPeers returns, for each interface of the current thread's network namespace whose
// peer is in another namespace, the peer's index there.
func vethPeers() ([]int, error) {
	rib, err := syscall.NetlinkRIB(syscall.RTM_GETLINK, syscall.AF_UNSPEC)
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(rib)
	if err != nil {
		return nil, fmt.Errorf("parse links: %w", err)
	}
	var peers []int
	for i := range msgs {
		m := &msgs[i]
		if m.Header.Type != syscall.RTM_NEWLINK {
			continue
		}
		attrs, err := syscall.ParseNetlinkRouteAttr(m)
		if err != nil {
			continue
		}
		link, otherNetns := 0, false
		for _, at := range attrs {
			switch at.Attr.Type {
			case unix.IFLA_LINK:
				if len(at.Value) >= 4 {
					link = int(binaryutil.NativeEndian.Uint32(at.Value[:4]))
				}
			case unix.IFLA_LINK_NETNSID:
				otherNetns = true
			}
		}
		if link > 0 && otherNetns {
			peers = append(peers, link)
		}
	}
	return peers, nil
}

// install replaces port's chain with the pins of ip and mac and maps the port to it, in
// one batch (the kernel commits it as one transaction).
func (a *antiSpoof) install(port string, ip netip.Addr, mac net.HardwareAddr) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("open netlink connection for nftables: %w", err)
	}
	t := a.table()
	chain := c.AddChain(&nftables.Chain{Name: antiSpoofPortChain + port, Table: t})
	c.FlushChain(chain)
	for _, exprs := range portRules(ip, mac) {
		c.AddRule(&nftables.Rule{Table: t, Chain: chain, Exprs: exprs})
	}
	if err := c.SetAddElements(a.portsMap(t), []nftables.SetElement{{
		Key:         ifnameKey(port),
		VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: chain.Name},
	}}); err != nil {
		return fmt.Errorf("queue map element: %w", err)
	}
	return c.Flush()
}

// ifnameKey is an interface name as meta iifname loads it: IFNAMSIZ bytes, NUL-padded.
func ifnameKey(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

const (
	etherTypeIPv4 = 0x0800
	etherTypeARP  = 0x0806
)

// portRules are the rules of one port's chain: ip and mac are the only source addresses
// its frames may carry, in the Ethernet header, in ARP and in IPv4.
func portRules(ip netip.Addr, mac net.HardwareAddr) [][]expr.Any {
	drop := &expr.Verdict{Kind: expr.VerdictDrop}
	ret := &expr.Verdict{Kind: expr.VerdictReturn}
	etherType := func(t uint16) []expr.Any {
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseLLHeader, Offset: 12, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(t)},
		}
	}
	differs := func(base expr.PayloadBase, offset uint32, want []byte) []expr.Any {
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: base, Offset: offset, Len: uint32(len(want))},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: want},
		}
	}
	ip4 := ip.As4()
	nh := expr.PayloadBaseNetworkHeader
	// ARP for Ethernet and IPv4: htype 1, ptype 0x0800, hlen 6, plen 4; other layouts
	// would move the addresses the next rules read.
	arpLayout := []byte{0, 1, 8, 0, 6, 4}
	return [][]expr.Any{
		append(differs(expr.PayloadBaseLLHeader, 6, mac), drop),
		append(append(etherType(etherTypeARP), differs(nh, 0, arpLayout)...), drop),
		append(append(etherType(etherTypeARP), differs(nh, 8, mac)...), drop),
		append(append(etherType(etherTypeARP), differs(nh, 14, ip4[:])...), drop),
		append(append(etherType(etherTypeIPv4), differs(nh, 12, ip4[:])...), drop),
		append(etherType(etherTypeARP), ret),
		append(etherType(etherTypeIPv4), ret),
		{drop},
	}
}

// dropGonePorts removes the chains and map elements of ports that are no longer ports
// of the bridge (their namespace is gone), each in a batch of its own so that another
// gateway removing the same port fails only its own batch. It returns how many it
// removed.
func (a *antiSpoof) dropGonePorts() int {
	c, err := nftables.New()
	if err != nil {
		return 0
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyBridge)
	if err != nil {
		return 0
	}
	name := AntiSpoofTable(a.bridge)
	removed := 0
	for _, ch := range chains {
		port, ok := strings.CutPrefix(ch.Name, antiSpoofPortChain)
		if ch.Table.Name != name || !ok || a.isPort(port) {
			continue
		}
		t := a.table()
		_ = c.SetDeleteElements(a.portsMap(t), []nftables.SetElement{{Key: ifnameKey(port)}})
		c.DelChain(&nftables.Chain{Name: ch.Name, Table: t})
		if c.Flush() == nil {
			removed++
		}
	}
	return removed
}

// portsOf lists the ports the table of bridge pins.
func portsOf(bridge string) ([]string, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, err
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyBridge)
	if err != nil {
		return nil, err
	}
	var ports []string
	for _, ch := range chains {
		if port, ok := strings.CutPrefix(ch.Name, antiSpoofPortChain); ok && ch.Table.Name == AntiSpoofTable(bridge) {
			ports = append(ports, port)
		}
	}
	return ports, nil
}

// removeGoneBridgeTables removes the runtime's tables whose bridge no longer exists (a
// network removed while its gateway was gone).
func removeGoneBridgeTables() {
	c, err := nftables.New()
	if err != nil {
		return
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyBridge)
	if err != nil {
		return
	}
	for _, t := range tables {
		bridge, ok := strings.CutPrefix(t.Name, antiSpoofTablePrefix)
		if !ok {
			continue
		}
		if _, err := os.Stat(filepath.Join("/sys/class/net", bridge)); errors.Is(err, os.ErrNotExist) {
			c.DelTable(t)
			_ = c.Flush()
		}
	}
}

// dropGoneAntiSpoofPorts removes the pins of ports whose namespace is gone (Delete).
func (r *Runtime) dropGoneAntiSpoofPorts() {
	if r.antiSpoof != nil {
		r.antiSpoof.dropGonePorts()
	}
}

// closeAntiSpoof removes the table once no container is left on the network (Close):
// the last runtime of a network leaves nothing behind.
func (r *Runtime) closeAntiSpoof(ctx context.Context) {
	a := r.antiSpoof
	if a == nil {
		return
	}
	a.dropGonePorts()
	list, err := r.cli.ContainerList(ctx, client.ContainerListOptions{
		All: true, Filters: make(client.Filters).Add("network", r.opts.Network),
	})
	if err != nil || len(list.Items) > 0 {
		return
	}
	if ports, err := portsOf(a.bridge); err != nil || len(ports) > 0 {
		return
	}
	c, err := nftables.New()
	if err != nil {
		return
	}
	c.DelTable(a.table())
	_ = c.Flush()
}
