//go:build !linux

package capture

import "fmt"

func openLive(iface string, _ uint16) (packets, error) {
	return nil, fmt.Errorf("capture on %s: live capture needs Linux (AF_PACKET); read a tcpdump file with --pcap instead", ifaceName(iface))
}
