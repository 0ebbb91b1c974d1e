/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * Runs the real sidecar (`bin/istota serve` from `make build`) for the browser tests,
 * with a temporary data dir and a config written here. Without a bot account the sidecar
 * keeps each user's files in its local mirror (<data_dir>/users/<uid>/workspace), so tests
 * seed and change USER.md or CRON.md there as a user editing in Files would.
 */
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { existsSync } from 'node:fs'
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises'
import net from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/**
 * freePort asks the kernel for a port nobody listens on.
 *
 * @return {Promise<number>}
 */
export async function freePort() {
	const s = net.createServer()
	await new Promise((resolve) => s.listen(0, '127.0.0.1', resolve))
	const { port } = s.address()
	await new Promise((resolve) => s.close(resolve))
	return port
}

/**
 * startSidecar writes a config and starts `istota serve`, waiting for /v1/health.
 *
 * @param {object} o options
 * @param {string} o.repoRoot the repository (bin/istota and the npm claude CLI are found there)
 * @param {string} o.nextcloudUrl the harness origin: the sidecar checks WebSocket Origins against it
 * @param {string} [o.extraToml] more configuration appended to the file
 * @param {object} [o.env] more environment for the sidecar (e.g. SSL_CERT_FILE)
 * @return {Promise<object>} url, secret, dir, userDir(uid), dbPath, logs(), stop()
 */
export async function startSidecar({ repoRoot, nextcloudUrl, extraToml = '', env = {} }) {
	const binary = join(repoRoot, 'bin', 'istota')
	if (!existsSync(binary)) {
		throw new Error(`${binary} is missing: run make build first`)
	}
	const dir = await mkdtemp(join(tmpdir(), 'istota-browser-'))
	await chmod(dir, 0o755)
	const secret = randomBytes(24).toString('hex')
	const port = await freePort()
	const deadApi = await freePort()
	const claude = join(repoRoot, 'nextcloud-app', 'node_modules', '@anthropic-ai', 'claude-code', 'bin', 'claude.exe')
	const config = `data_dir = ${JSON.stringify(join(dir, 'data'))}
[server]
listen = "127.0.0.1:${port}"
[nextcloud]
url = ${JSON.stringify(nextcloudUrl)}
shared_secret = ${JSON.stringify(secret)}
bot_user = "istota"
[talk]
bot_name = "Istota"
[brain]
claude_path = ${JSON.stringify(claude)}
api_base_url = "http://127.0.0.1:${deadApi}"
api_key = "browser-test-key"
task_timeout = "30s"
[sandbox]
agent_user = "nobody"
[log]
level = "debug"
${extraToml}
`
	const cfgPath = join(dir, 'istota.toml')
	await writeFile(cfgPath, config, { mode: 0o600 })

	let output = ''
	const child = spawn(binary, ['serve', '-c', cfgPath], { stdio: ['ignore', 'pipe', 'pipe'], detached: true, env: { ...process.env, ...env } })
	child.stdout.on('data', (c) => { output += c })
	child.stderr.on('data', (c) => { output += c })
	const exited = new Promise((resolve) => child.on('exit', resolve))
	let gone = false
	exited.then(() => { gone = true })

	const url = `http://127.0.0.1:${port}`
	const deadline = Date.now() + 60000
	for (;;) {
		if (gone) {
			throw new Error(`istota serve exited at start:\n${output}`)
		}
		try {
			const res = await fetch(url + '/v1/health')
			if (res.ok) {
				break
			}
		} catch {
			// not listening yet
		}
		if (Date.now() > deadline) {
			process.kill(-child.pid, 'SIGKILL')
			throw new Error(`istota serve did not become healthy:\n${output}`)
		}
		await new Promise((resolve) => setTimeout(resolve, 100))
	}

	return {
		url,
		secret,
		dir,
		/** userDir is where uid's /Users/{uid}/ folder lives (uids of plain letters). */
		userDir: (uid) => join(dir, 'data', 'users', uid, 'workspace'),
		dbPath: join(dir, 'data', 'db', 'istota.db'),
		logs: () => output,
		/** stop ends the sidecar (SIGTERM, then SIGKILL) and removes its directory. */
		async stop() {
			if (!gone) {
				process.kill(-child.pid, 'SIGTERM')
				const timer = setTimeout(() => { if (!gone) process.kill(-child.pid, 'SIGKILL') }, 15000)
				await exited
				clearTimeout(timer)
			}
			await rm(dir, { recursive: true, force: true })
		},
	}
}
