package docker

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/sandgate/sandgate/runtimes"
	"github.com/sandgate/sandgate/test/testenv"
)

// hostileImage builds, from image, what a tenant who wants its enforcer for itself
// brings (or gets by snapshotting a sandbox it tampered with): a /bin/sh that installs
// an allow-all policy where the enforcer keeps its state and then runs what it was
// asked to, that state file already in place, and an environment meant for the
// enforcer. It returns the image's tag, removed when the test ends.
func hostileImage(t *testing.T, image string) string {
	t.Helper()
	tag := "sandgate-test/hostile:" + testenv.RandomHex(4)
	dir := t.TempDir()
	dockerfile := `FROM ` + image + `
RUN cp /bin/sh /bin/sh.real && mkdir -p /var/lib/sandgate-egress \
 && printf '{"policy":{"defaultAction":"allow","egress":[]}}' > /var/lib/sandgate-egress/policy.json \
 && rm /bin/sh \
 && printf '#!/bin/sh.real\nmkdir -p /var/lib/sandgate-egress\nprintf %%s '"'"'{"policy":{"defaultAction":"allow","egress":[]}}'"'"' > /var/lib/sandgate-egress/policy.json\nexec /bin/sh.real "$@"\n' > /bin/sh \
 && chmod 755 /bin/sh
ENV LD_PRELOAD=/nonexistent/hostile.so SANDGATE_EGRESS_UPSTREAM=127.0.0.1:1 SANDGATE_HOSTILE=1
`
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("docker", "build", "-q", "-t", tag, dir)
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", tag).Run() })
	return tag
}

// TestEnforcerOwesNothingToTheImage attacks the enforcer through the workload's image:
// a deny-all sandbox made from an image whose /bin/sh, state file and ENV are the
// tenant's must still come up deny-all, with and without a spare namespace, its
// enforcer owing nothing to that image: a sidecar runs from the helpers' image with no
// variable of the workload's image and no shell, a process runs the runtime's own copy
// of the agent in a root of its own with the runtime's environment only.
func TestEnforcerOwesNothingToTheImage(t *testing.T) {
	for _, mode := range []string{EnforcerContainer, EnforcerProcess} {
		t.Run(mode, func(t *testing.T) {
			var r *Runtime
			var base string
			if mode == EnforcerProcess {
				r, base = processRuntime(t)
			} else {
				r, base = testRuntimeWith(t, mode)
			}
			image := hostileImage(t, base)
			ctx := context.Background()
			for _, spare := range []bool{false, true} {
				name := "own namespace"
				if spare {
					name = "spare namespace"
					waitSpare(t, r)
				}
				t.Run(name, func(t *testing.T) {
					spec := enforcedSpec(t, r, image, `{"defaultAction":"deny"}`)
					inst, err := r.Create(ctx, spec)
					if err != nil {
						t.Fatalf("create: %v", err)
					}
					if got := signedPolicy(t, inst.Address, spec.EgressToken); !strings.Contains(got, `"defaultAction":"deny"`) {
						t.Fatalf("a deny-all sandbox of a tampered image enforces %s", got)
					}
					if mode == EnforcerProcess {
						enforcerOwesNothingAsProcess(t, r, spec.ID)
						return
					}
					sc, err := r.cli.ContainerInspect(ctx, egressContainerName(spec.ID), client.ContainerInspectOptions{})
					if err != nil {
						t.Fatal(err)
					}
					helper, err := r.helperImage(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if sc.Container.Image != helper {
						t.Fatalf("the enforcer runs from image %s, not the helpers' %s", sc.Container.Image, helper)
					}
					for _, kv := range sc.Container.Config.Env {
						if strings.HasPrefix(kv, "LD_PRELOAD=") || strings.HasPrefix(kv, "SANDGATE_HOSTILE=") || strings.HasPrefix(kv, "SANDGATE_EGRESS_UPSTREAM=") {
							t.Fatalf("the enforcer's environment holds the image's %s", kv)
						}
					}
					if _, err := r.cli.ContainerStatPath(ctx, sc.Container.ID, client.ContainerStatPathOptions{Path: "/bin/sh"}); err == nil {
						t.Fatal("the enforcer's filesystem has a /bin/sh")
					}
				})
			}
		})
	}
}

// enforcerOwesNothingAsProcess checks that sandbox id's enforcer process runs the
// runtime's copy of the agent (the same file), in a root holding nothing of the
// workload's image, with none of the image's variables.
func enforcerOwesNothingAsProcess(t *testing.T, r *Runtime, id string) {
	t.Helper()
	rec := enforcerRecordOf(t, r, id)
	exe, err := os.Stat("/proc/" + strconv.Itoa(rec.PID) + "/exe")
	if err != nil {
		t.Fatal(err)
	}
	copyOf, err := os.Stat(r.procs.agent)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(exe, copyOf) {
		t.Fatalf("the enforcer process runs %v, not the runtime's copy of the agent %s", exe.Name(), r.procs.agent)
	}
	environ, err := os.ReadFile("/proc/" + strconv.Itoa(rec.PID) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range strings.Split(string(environ), "\x00") {
		if strings.HasPrefix(kv, "LD_PRELOAD=") || strings.HasPrefix(kv, "SANDGATE_HOSTILE=") || strings.HasPrefix(kv, "SANDGATE_EGRESS_UPSTREAM=") {
			t.Fatalf("the enforcer's environment holds the image's %s", kv)
		}
	}
	root := filepath.Join(r.procs.sandboxDir(id), "root")
	for _, path := range []string{"bin/sh", "var/lib/sandgate-egress/policy.json"} {
		if _, err := os.Lstat(filepath.Join(root, path)); err == nil {
			t.Fatalf("the enforcer's root has the image's /%s", path)
		}
	}
}

// TestHelperImageIsCheckedNotTrusted: an image put under the helpers' tag by someone
// else (here: the hostile image, retagged) is not used; the runtime imports its own.
func TestHelperImageIsCheckedNotTrusted(t *testing.T) {
	first, base := testRuntime(t)
	image := hostileImage(t, base)
	// The helpers' image as it was: put back under its tag at the end, and the one this
	// test makes the runtime import removed, so that no image is left untagged.
	original, err := first.helperImage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var imported string
	t.Cleanup(func() {
		_ = exec.Command("docker", "tag", original, helperImageTag).Run()
		if imported != "" && imported != original {
			_ = exec.Command("docker", "rmi", imported).Run()
		}
	})
	if out, err := exec.Command("docker", "tag", image, helperImageTag).CombinedOutput(); err != nil {
		t.Fatalf("docker tag: %v: %s", err, out)
	}
	ctx := context.Background()
	hostile, err := exec.Command("docker", "image", "inspect", "-f", "{{.Id}}", image).Output()
	if err != nil {
		t.Fatal(err)
	}
	// A runtime started after the tag was taken.
	r, _ := testRuntime(t)
	got, err := r.helperImage(ctx)
	if err != nil {
		t.Fatalf("helperImage: %v", err)
	}
	imported = got
	if got == strings.TrimSpace(string(hostile)) {
		t.Fatal("the runtime took the image under its tag for its own")
	}
	img, err := r.cli.ImageInspect(ctx, got)
	if err != nil {
		t.Fatal(err)
	}
	if len(img.RootFS.Layers) != 1 || !slices.Contains(img.RepoTags, helperImageTag) {
		t.Fatalf("helper image %s: layers %v, tags %v; want one layer, under %s again", got, img.RootFS.Layers, img.RepoTags, helperImageTag)
	}
}

// TestEnforcementMismatchRefused: a runtime that finds the enforcer reporting another
// policy than the one it sent fails the create with ErrEnforcementMismatch (the
// enforcer is told one policy by its environment and the check is handed another, as
// an enforcer that loaded a foreign state file would answer).
func TestEnforcementMismatchRefused(t *testing.T) {
	r, image := testRuntime(t)
	ctx := context.Background()
	spec := enforcedSpec(t, r, image, `{"defaultAction":"deny","egress":[{"action":"allow","target":"given.test"}]}`)
	inst, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	other := spec
	otherEgress := *spec.Egress
	otherEgress.Policy = []byte(`{"defaultAction":"deny","egress":[{"action":"allow","target":"other.test"}]}`)
	other.Egress = &otherEgress
	if err := r.waitEgressHealthy(ctx, other, inst.Address); !errors.Is(err, runtimes.ErrEnforcementMismatch) {
		t.Fatalf("an enforcer reporting given.test passed for one enforcing other.test: %v", err)
	}
	if err := r.waitEgressHealthy(ctx, spec, inst.Address); err != nil {
		t.Fatalf("the enforcer's own policy: %v", err)
	}
}
