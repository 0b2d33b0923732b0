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

// TestLayouts reads synthetic cgroup trees laid out like v1 and v2 hosts, including a
// container without a cgroup namespace (its path is not under the mount).
func TestLayouts(t *testing.T) {
	write := func(t *testing.T, root, rel, content string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("v2", func(t *testing.T) {
		root := t.TempDir()
		write(t, root, "cgroup.controllers", "cpu memory")
		write(t, root, "box/cpu.stat", "usage_usec 2000\nuser_usec 1000\n")
		write(t, root, "box/cpu.max", "50000 100000\n")
		write(t, root, "box/memory.current", "3000000\n")
		write(t, root, "box/memory.stat", "anon 1\ninactive_file 1000000\n")
		write(t, root, "box/memory.max", "4194304\n")
		old := Root
		Root = root
		defer func() { Root = old }()
		s, err := readV2(resolve("", "/box"))
		if err != nil {
			t.Fatal(err)
		}
		if s.CPUUsageNanos != 2_000_000 || s.CPULimit != 0.5 || s.MemUsedBytes != 2_000_000 || s.MemLimitBytes != 4194304 {
			t.Fatalf("sample %+v", s)
		}
	})
	t.Run("v1 without cgroup namespace", func(t *testing.T) {
		root := t.TempDir()
		write(t, root, "memory/memory.usage_in_bytes", "5000000\n")
		write(t, root, "memory/memory.stat", "total_inactive_file 1000000\n")
		write(t, root, "memory/memory.limit_in_bytes", "8388608\n")
		write(t, root, "cpuacct/cpuacct.usage", "123456\n")
		write(t, root, "cpu/cpu.cfs_quota_us", "150000\n")
		write(t, root, "cpu/cpu.cfs_period_us", "100000\n")
		old := Root
		Root = root
		defer func() { Root = old }()
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
