package redistest

import (
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
)

// Sentinels is a master, its replica and three Sentinels watching them as
// Name (down after 500 ms).
type Sentinels struct {
	Name      string
	Master    *Server
	Replica   *Server
	Sentinels []*Server
}

// Addrs are the Sentinels' addresses.
func (s *Sentinels) Addrs() []string {
	var a []string
	for _, x := range s.Sentinels {
		a = append(a, x.Addr)
	}
	return a
}

// StartSentinels runs a master, a replica of it and three Sentinels.
func StartSentinels(t testing.TB) *Sentinels {
	t.Helper()
	ss := &Sentinels{Name: "rlmaster"}
	ss.Master = Start(t)
	ss.Replica = Start(t, "replicaof 127.0.0.1 "+strconv.Itoa(ss.Master.Port))
	bin := binary(t, "redis-sentinel")
	for range 3 {
		ss.Sentinels = append(ss.Sentinels, start(t, bin, true, mtatest.FreePort(t),
			"sentinel monitor "+ss.Name+" 127.0.0.1 "+strconv.Itoa(ss.Master.Port)+" 2",
			"sentinel down-after-milliseconds "+ss.Name+" 500",
			"sentinel failover-timeout "+ss.Name+" 3000",
			"sentinel parallel-syncs "+ss.Name+" 1"))
	}
	mtatest.WaitFor(t, 20*time.Second, func() error {
		if !strings.Contains(ss.Replica.Info("replication", "master_link_status"), "up") {
			return errors.New("redistest: replica not in sync")
		}
		for _, s := range ss.Sentinels {
			v, err := s.Do("SENTINEL", "MASTER", ss.Name)
			if err != nil {
				return err
			}
			f := strings.Split(v, "\n")
			got := map[string]string{}
			for i := 0; i+1 < len(f); i += 2 {
				got[f[i]] = f[i+1]
			}
			if got["num-slaves"] != "1" || got["num-other-sentinels"] != "2" {
				return fmt.Errorf("redistest: sentinel %s sees %s replicas and %s other sentinels, want 1 and 2",
					s.Addr, got["num-slaves"], got["num-other-sentinels"])
			}
		}
		return nil
	})
	return ss
}

// MasterAddr asks the first answering Sentinel for the current master.
func (s *Sentinels) MasterAddr() string {
	for _, x := range s.Sentinels {
		if v, err := x.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.Name); err == nil {
			f := strings.Split(v, "\n")
			if len(f) == 2 {
				return f[0] + ":" + f[1]
			}
		}
	}
	return ""
}

// StartCluster runs a Redis Cluster of n masters, no replicas, with
// cluster-require-full-coverage no, and waits until it is ok.
func StartCluster(t testing.TB, n int) []*Server {
	t.Helper()
	cli := binary(t, "redis-cli")
	var nodes []*Server
	args := []string{"--cluster", "create"}
	for range n {
		bus := mtatest.FreePort(t)
		s := Start(t, "cluster-enabled yes", "cluster-config-file nodes.conf", "cluster-node-timeout 2000",
			"cluster-require-full-coverage no",
			"cluster-port "+strconv.Itoa(bus))
		nodes = append(nodes, s)
		args = append(args, s.Addr)
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	mtatest.WaitFor(t, 20*time.Second, func() error {
		for _, s := range nodes {
			if v, err := s.Do("CLUSTER", "INFO"); err != nil || !strings.Contains(v, "cluster_state:ok") {
				return fmt.Errorf("redistest: cluster state of %s not ok: %v", s.Addr, err)
			}
		}
		return nil
	})
	return nodes
}

// SlotOwners returns per hash slot (16384) the index in nodes of its
// master (-1: none), per CLUSTER SLOTS; nil if no node answers.
func SlotOwners(nodes []*Server) []int {
	for _, n := range nodes {
		v, err := n.Do("CLUSTER", "SLOTS")
		if err != nil {
			continue
		}
		owners := make([]int, 16384)
		for i := range owners {
			owners[i] = -1
		}
		// start, end, host, port, id per range.
		f := strings.Split(v, "\n")
		for i := 0; i+4 < len(f); i += 5 {
			lo, _ := strconv.Atoi(f[i])
			hi, _ := strconv.Atoi(f[i+1])
			port, _ := strconv.Atoi(f[i+3])
			for j, s := range nodes {
				if s.Port == port {
					for slot := max(lo, 0); slot <= min(hi, 16383); slot++ {
						owners[slot] = j
					}
				}
			}
		}
		return owners
	}
	return nil
}
