//go:build race

package probe

// raceEnabled: the race detector makes long allocation-heavy tests ~5x
// slower, so they skip themselves under it; and rxConn must tell it about
// the synchronisation its raw recvmsg carries (see rxConn.recv).
const raceEnabled = true
