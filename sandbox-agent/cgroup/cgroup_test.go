package cgroup

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReadThisProcess(t *testing.T) {
	s, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	if s.CPULimit <= 0 || s.MemLimitBytes == 0 || s.MemUsedBytes == 0 || s.MemUsedBytes > s.MemLimitBytes || s.Source == "" {
		t.Fatalf("implausible sample %+v", s)
	}
	t.Logf("source %s: %+v", s.Source, s)
}

// fakeRoot lays out files (path → content) in a new directory and makes it the cgroup
// Root until the test ends.
func fakeRoot(t *testing.T, files map[string]string) {
	t.Helper()
	root := t.TempDir()
	for rel, content := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := Root
	Root = root
	t.Cleanup(func() { Root = old })
}

// TestLayouts reads synthetic cgroup trees laid out like v1 and v2 hosts, including a
// container without a cgroup namespace (its path is not under the mount).
func TestLayouts(t *testing.T) {
	t.Run("v2", func(t *testing.T) {
		fakeRoot(t, map[string]string{
			"cgroup.controllers": "cpu memory",
			"box/cpu.stat":       "usage_usec 2000\nuser_usec 1000\n",
			"box/cpu.max":        "50000 100000\n",
			"box/memory.current": "3000000\n",
			"box/memory.stat":    "anon 1\ninactive_file 1000000\n",
			"box/memory.max":     "4194304\n",
		})
		s, err := readV2(resolve("", "/box"))
		if err != nil {
			t.Fatal(err)
		}
		if s.CPUUsageNanos != 2_000_000 || s.CPULimit != 0.5 || s.MemUsedBytes != 2_000_000 || s.MemLimitBytes != 4194304 {
			t.Fatalf("sample %+v", s)
		}
	})
	t.Run("v1 without cgroup namespace", func(t *testing.T) {
		fakeRoot(t, map[string]string{
			"memory/memory.usage_in_bytes": "5000000\n",
			"memory/memory.stat":           "total_inactive_file 1000000\n",
			"memory/memory.limit_in_bytes": "8388608\n",
			"cpuacct/cpuacct.usage":        "123456\n",
			"cpu/cpu.cfs_quota_us":         "150000\n",
			"cpu/cpu.cfs_period_us":        "100000\n",
		})
		groups := map[string]string{"memory": "/docker/abc", "cpuacct": "/docker/abc", "cpu": "/docker/abc"}
		s, err := readV1(groups)
		if err != nil {
			t.Fatal(err)
		}
		if s.CPUUsageNanos != 123456 || s.MemUsedBytes != 4_000_000 || s.MemLimitBytes != 8388608 {
			t.Fatalf("sample %+v", s)
		}
		if s.CPULimit != min(1.5, visibleCPUs()) {
			t.Fatalf("cpu limit %v", s.CPULimit)
		}
	})
}
