// An aedes broker for tests/brokers.py: node broker.js PORT, on 127.0.0.1 only, in memory.
// Says "listening" on stdout once it takes connections; every client error and protocol error
// on stderr (a test that fails shows what the broker saw); a SIGTERM closes it.
import { createServer } from 'node:net'
import { Aedes } from 'aedes'

const port = Number(process.argv[2])
if (!Number.isInteger(port) || port <= 0) {
  console.error('usage: node broker.js PORT')
  process.exit(2)
}
const aedes = await Aedes.createBroker()
aedes.on('clientError', (client, err) => {
  console.error(`aedes: client ${client?.id} error: ${err.message}`)
})
aedes.on('connectionError', (client, err) => {
  console.error(`aedes: connection ${client?.id} error: ${err.message}`)
})
const server = createServer(aedes.handle)
server.listen(port, '127.0.0.1', () => console.log(`listening on 127.0.0.1:${port}`))
process.on('SIGTERM', () => {
  server.close()
  aedes.close(() => process.exit(0))
})
