package docker

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/test/testenv"
)

// TestCreateInSpareNamespace: a create with an egress policy takes a spare namespace
// holder; the workload and its enforcer join the holder's namespace, the sandbox's
// address is the holder's (in the create's answer, in Inspect and in List), the holder
// is renamed for the sandbox and replaced by a new spare, its network counters are the
// holder's interface's, the reconciler's RestoreEgress
// still gives the running workload a new enforcer, and Delete and Close leave nothing.
func TestCreateInSpareNamespace(t *testing.T) {
	r, image := testRuntime(t)
	ctx := context.Background()
	waitSpare(t, r)
	spec := enforcedSpec(t, r, image, `{"defaultAction":"deny","egress":[{"action":"allow","target":"created.test"}]}`)
	id := spec.ID
	inst, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if !inst.Complete || inst.Address == "" {
		t.Fatalf("create: complete %t, address %q", inst.Complete, inst.Address)
	}
	h, err := r.cli.ContainerInspect(ctx, holderName(id), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("the holder is not named for the sandbox: %v", err)
	}
	if got := h.Container.NetworkSettings.Networks[r.opts.Network].IPAddress.String(); got != inst.Address {
		t.Fatalf("sandbox address %s, holder's %s", inst.Address, got)
	}
	inNamespace := []string{containerName(id)}
	if r.procs == nil {
		inNamespace = append(inNamespace, egressContainerName(id))
	} else if got, want := processNetns(t, r, id), containerNetns(t, h.Container.ID); got != want {
		t.Fatalf("the enforcer process is in network namespace %s, the holder's is %s", got, want)
	}
	for _, name := range inNamespace {
		c, err := r.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if nm := string(c.Container.HostConfig.NetworkMode); nm != "container:"+h.Container.ID {
			t.Fatalf("%s network mode %q, want the holder's namespace", name, nm)
		}
	}
	if got := signedPolicy(t, inst.Address, spec.EgressToken); !strings.Contains(got, "created.test") {
		t.Fatalf("initial policy: %s", got)
	}
	if out, err := exec.Command("docker", "exec", containerName(id), "hostname").Output(); err != nil || strings.TrimSpace(string(out)) != holderHostname {
		t.Fatalf("hostname %q (%v), want %q", out, err, holderHostname)
	}
	got, err := r.Inspect(ctx, id)
	if err != nil || got.Address != inst.Address || !got.Complete || got.EgressToken != spec.EgressToken {
		t.Fatalf("Inspect: %+v, %v", got, err)
	}
	list, err := r.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range list {
		if l.ID == id {
			found = l.Address == inst.Address
		}
	}
	if !found {
		t.Fatalf("List lacks %s at %s: %+v", id, inst.Address, list)
	}
	if u, err := r.Usage(ctx, id, false); err != nil || !u.NetKnown {
		t.Fatalf("Usage: network counters known %t (%v); the holder's interface is the sandbox's", u.NetKnown, err)
	}
	waitSpare(t, r) // the taken spare is replaced

	// The enforcer is gone; RestoreEgress gives the running workload a new one in the
	// same (the holder's) namespace.
	r.removeEgress(ctx, id)
	current := *spec.Egress
	current.Policy = []byte(`{"defaultAction":"deny","egress":[{"action":"allow","target":"current.test"}]}`)
	spec.Egress = &current
	if err := r.RestoreEgress(ctx, spec); err != nil {
		t.Fatalf("RestoreEgress: %v", err)
	}
	if got := signedPolicy(t, inst.Address, spec.EgressToken); !strings.Contains(got, "current.test") {
		t.Fatalf("restored policy: %s", got)
	}

	if err := r.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{containerName(id), egressContainerName(id), holderName(id)} {
		if _, err := r.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{}); err == nil {
			t.Fatalf("%s left after Delete", name)
		}
	}
	if r.procs != nil {
		if _, err := os.Stat(r.procs.sandboxDir(id)); err == nil {
			t.Fatalf("the enforcer process's directory is left after Delete")
		}
	}
	r.Close()
	out, _ := exec.Command("docker", "ps", "-aq", "--filter", "network="+r.opts.Network).Output()
	if left := strings.Fields(string(out)); len(left) != 0 {
		t.Fatalf("containers left on the network after Close: %v", left)
	}
}

// TestSweepHolders: the sweep removes a holder whose workload was removed by other means
// and a spare whose owner process is gone, and keeps this runtime's spares.
func TestSweepHolders(t *testing.T) {
	r, image := testRuntime(t)
	ctx := context.Background()
	waitSpare(t, r)
	spec := enforcedSpec(t, r, image, `{"defaultAction":"deny"}`)
	id := spec.ID
	if _, err := r.Create(ctx, spec); err != nil {
		t.Fatalf("create: %v", err)
	}
	// An operator's `docker rm -f` of the workload.
	if out, err := exec.Command("docker", "rm", "-f", containerName(id)).CombinedOutput(); err != nil {
		t.Fatalf("docker rm: %v: %s", err, out)
	}
	// A spare left by a process that is gone (pid 1 of this host never had this start).
	orphan := sparePrefix + "orphan" + testenv.RandomHex(3)
	if out, err := exec.Command("docker", "create", "--name", orphan, "--network", r.opts.Network,
		"--label", labelRole+"="+roleNetns, "--label", labelSpareOwner+"="+hostname(t)+"/1/0/x", helperImageTag, "/none").CombinedOutput(); err != nil {
		t.Fatalf("docker create: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", orphan).Run() })
	waitSpare(t, r)
	spares := len(r.spares)
	if _, err := r.SweepHelpers(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{holderName(id), orphan, egressContainerName(id)} {
		if _, err := r.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{}); err == nil {
			t.Errorf("%s not swept", name)
		}
	}
	if r.procs != nil {
		if _, err := os.Stat(r.procs.sandboxDir(id)); err == nil {
			t.Errorf("the enforcer process of removed workload %s not swept", id)
		}
	}
	res, err := r.cli.ContainerList(ctx, client.ContainerListOptions{Filters: make(client.Filters).Add("label", labelSpareOwner+"="+r.owner)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Items) < spares {
		t.Fatalf("the sweep removed the runtime's own spares: %d left of %d", len(res.Items), spares)
	}
}

func hostname(t *testing.T) string {
	out, err := exec.Command("hostname").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// TestCreateWithDeadSpare: a spare that died while it waited (killed) does not fail a
// create: the create is made again in a namespace of its own, complete and enforced.
func TestCreateWithDeadSpare(t *testing.T) {
	r, image := testRuntime(t)
	ctx := context.Background()
	waitSpare(t, r)
	res, err := r.cli.ContainerList(ctx, client.ContainerListOptions{Filters: make(client.Filters).Add("label", labelSpareOwner+"="+r.owner)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Items {
		if out, err := exec.Command("docker", "kill", c.ID).CombinedOutput(); err != nil {
			t.Fatalf("docker kill: %v: %s", err, out)
		}
	}
	spec := enforcedSpec(t, r, image, `{"defaultAction":"deny","egress":[{"action":"allow","target":"created.test"}]}`)
	id := spec.ID
	inst, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create with a dead spare: %v", err)
	}
	if !inst.Complete || inst.Address == "" {
		t.Fatalf("create: complete %t, address %q", inst.Complete, inst.Address)
	}
	if got := signedPolicy(t, inst.Address, spec.EgressToken); !strings.Contains(got, "created.test") {
		t.Fatalf("policy: %s", got)
	}
	if _, err := r.cli.ContainerInspect(ctx, holderName(id), client.ContainerInspectOptions{}); err == nil {
		t.Fatal("the sandbox is in the dead spare's namespace")
	}
}

// TestHolderDeathReported: a sandbox whose namespace holder dies has lost its network
// (its workload runs on, unreachable): WatchDeaths reports the sandbox dead, so that a
// warm member in that state leaves its pool and a claimed one is marked Failed.
func TestHolderDeathReported(t *testing.T) {
	r, image := testRuntime(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waitSpare(t, r)
	spec := enforcedSpec(t, r, image, `{"defaultAction":"deny"}`)
	id := spec.ID
	if _, err := r.Create(ctx, spec); err != nil {
		t.Fatalf("create: %v", err)
	}
	reported := make(chan string, 16)
	go func() { _ = r.WatchDeaths(ctx, func(id string) { reported <- id }) }()
	time.Sleep(300 * time.Millisecond) // the event stream is open
	if out, err := exec.Command("docker", "kill", holderName(id)).CombinedOutput(); err != nil {
		t.Fatalf("docker kill: %v: %s", err, out)
	}
	timeout := time.After(20 * time.Second)
	for {
		select {
		case got := <-reported:
			if got == id {
				return
			}
		case <-timeout:
			t.Fatal("the holder's death was not reported as the sandbox's")
		}
	}
}

// TestPauseTwiceIsWrongState: a pause of a sandbox the engine has paused already, and a
// resume of one it has not paused, are ErrWrongState (the core's conflict), not an
// engine failure.
func TestPauseTwiceIsWrongState(t *testing.T) {
	r, image := testRuntime(t)
	ctx := context.Background()
	id := "rt" + testenv.RandomHex(3) + "-0000-4000-8000-" + testenv.RandomHex(6)
	t.Cleanup(func() { _ = r.Delete(context.Background(), id) })
	spec := runtimes.Spec{ID: id, Tenant: "t", Image: image, Entrypoint: []string{"sleep", "infinity"}, CreatedAt: time.Now(),
		AgentToken: testenv.RandomHex(16)}
	if _, err := r.Create(ctx, spec); err != nil {
		t.Fatalf("create: %v", err)
	}
	if err := r.Pause(ctx, id); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if err := r.Pause(ctx, id); !errors.Is(err, runtimes.ErrWrongState) {
		t.Fatalf("second pause: %v, want ErrWrongState", err)
	}
	if err := r.Resume(ctx, id); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if err := r.Resume(ctx, id); !errors.Is(err, runtimes.ErrWrongState) {
		t.Fatalf("resume of a running sandbox: %v, want ErrWrongState", err)
	}
}

// TestSparesWaitWhileCreatesAreInFlight: a spare taken while another create is in flight
// is replaced only once no create is, so that the creates of a burst do not compete with
// spares being made (which would only add a container to the sandboxes that take them).
func TestSparesWaitWhileCreatesAreInFlight(t *testing.T) {
	r, image := testRuntime(t)
	ctx := context.Background()
	spares := r.spareCount()
	for deadline := time.Now().Add(60 * time.Second); len(r.spares) < spares; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d spares within 60 s, want %d", len(r.spares), spares)
		}
	}
	r.creating.Add(1) // another create in flight
	var ids []string
	for range spares {
		spec := enforcedSpec(t, r, image, `{"defaultAction":"deny"}`)
		if _, err := r.Create(ctx, spec); err != nil {
			t.Fatalf("create: %v", err)
		}
		ids = append(ids, spec.ID)
	}
	for _, id := range ids {
		if err := exec.Command("docker", "inspect", holderName(id)).Run(); err != nil {
			t.Fatalf("sandbox %s did not take a spare", id)
		}
	}
	time.Sleep(time.Second)
	r.spareMu.Lock()
	made := len(r.spares) + r.spareMaking
	r.spareMu.Unlock()
	if made != 0 {
		t.Fatalf("%d spares made or being made while a create was in flight", made)
	}
	r.creating.Add(-1)
	last := enforcedSpec(t, r, image, `{"defaultAction":"deny"}`)
	if _, err := r.Create(ctx, last); err != nil {
		t.Fatalf("create: %v", err)
	}
	if err := exec.Command("docker", "inspect", holderName(last.ID)).Run(); err == nil {
		t.Fatalf("sandbox %s took a spare that should not have been made", last.ID)
	}
	waitSpare(t, r) // replaced once no create is in flight
}
