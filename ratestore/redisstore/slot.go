package redisstore

import (
	"net"
	"strings"
	"time"
)

// Slot returns key's Redis Cluster hash slot: CRC16 (XMODEM) of its hash
// tag or key, mod 16384 (Cluster spec, "Keys distribution model").
func Slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc & 16383
}

// netDialer bounds dialing by timeout, at least 100ms.
func netDialer(timeout time.Duration) net.Dialer {
	return net.Dialer{Timeout: max(timeout, 100*time.Millisecond), KeepAlive: 30 * time.Second}
}
