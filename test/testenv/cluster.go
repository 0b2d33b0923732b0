package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// RedisCluster is a Redis Cluster of real redis-server processes on loopback ports:
// primaries only, every slot assigned, no persistence.
type RedisCluster struct {
	Ports []int
	// URL names the first node and the others as ?addr= seeds (go-redis's
	// ParseClusterURL form, and SANDGATE_REDIS_URL's with SANDGATE_REDIS_CLUSTER).
	URL   string
	nodes []*exec.Cmd
}

// StartRedisCluster starts masters redis-servers in cluster mode (files under dir),
// joins them with `redis-cli --cluster create` and waits until the cluster is ok.
func StartRedisCluster(dir string, masters int) (*RedisCluster, error) {
	c := &RedisCluster{}
	var addrs []string
	for i := 0; i < masters; i++ {
		port, err := FreePort()
		if err != nil {
			c.Stop()
			return nil, err
		}
		nodeDir := filepath.Join(dir, strconv.Itoa(port))
		if err := os.MkdirAll(nodeDir, 0o700); err != nil {
			c.Stop()
			return nil, err
		}
		cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", nodeDir,
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(nodeDir, "nodes.conf"),
			"--cluster-node-timeout", "5000")
		if err := cmd.Start(); err != nil {
			c.Stop()
			return nil, fmt.Errorf("start redis-server (run `make deps`): %w", err)
		}
		c.nodes = append(c.nodes, cmd)
		c.Ports = append(c.Ports, port)
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", port))
	}
	for _, a := range addrs {
		if err := waitListen(a, 10*time.Second); err != nil {
			c.Stop()
			return nil, err
		}
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		c.Stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %v: %s", err, Tail(string(out), 2000))
	}
	// Every node must know every slot's owner before a client is pointed at it.
	deadline := time.Now().Add(30 * time.Second)
	for _, a := range addrs {
		host, port, _ := net.SplitHostPort(a)
		for {
			out, _ := exec.Command("redis-cli", "-h", host, "-p", port, "cluster", "info").Output()
			if strings.Contains(string(out), "cluster_state:ok") && strings.Contains(string(out), "cluster_slots_ok:16384") {
				break
			}
			if time.Now().After(deadline) {
				c.Stop()
				return nil, fmt.Errorf("redis cluster node %s not ok: %s", a, out)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	c.URL = "redis://" + addrs[0]
	for i, a := range addrs[1:] {
		if i == 0 {
			c.URL += "?addr=" + a
		} else {
			c.URL += "&addr=" + a
		}
	}
	return c, nil
}

func waitListen(addr string, d time.Duration) error {
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		if conn, err := net.Dial("tcp", addr); err == nil {
			conn.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server did not listen on %s", addr)
		}
	}
}

// StopNode kills the node listening on port (a primary lost).
func (c *RedisCluster) StopNode(port int) {
	for i, p := range c.Ports {
		if p == port && c.nodes[i].Process != nil {
			_ = c.nodes[i].Process.Kill()
			_ = c.nodes[i].Wait()
			c.nodes[i].Process = nil
		}
	}
}

// Stop kills every node.
func (c *RedisCluster) Stop() {
	for _, cmd := range c.nodes {
		if cmd.Process != nil && cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}
	c.nodes = nil
}
