/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * "Your mailbox" on the personal page in Debian's Chromium: the built page, the harness
 * "app", a real sidecar (`bin/istota serve`) and a real IMAP server over TLS (go-imap's,
 * built from sidecar/internal/mailbox/mailboxtest/imapd). The sidecar trusts the
 * server's certificate through SSL_CERT_FILE and may reach it on loopback because the
 * configuration lists it in network.allow_private. The password typed must reach the
 * sidecar and nothing else: no answer, no page, no log, no database row in clear.
 *
 * Run with `make test-browser`.
 */
import assert from 'node:assert/strict'
import { execFileSync, spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { mkdir, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { createInterface } from 'node:readline'
import { after, before, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import { chromium } from 'playwright-core'
import { startHarness } from './harness/server.mjs'
import { startSidecar } from './harness/sidecar.mjs'
import { layoutProblems } from './layout.mjs'

const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..')
const shots = join(repoRoot, 'build', 'screenshots')
const chromiumPath = process.env.CHROMIUM_PATH || '/usr/bin/chromium'
const WAIT = 30000 // generous: only for waiting, never a pass/fail figure
const PASSWORD = 'browser-imap-Pa55word-7719'
const WRONG = 'not-the-password-3311'

let tmp
let imapd
let imapPort
let harness
let bobHarness
let sidecar
let browser

/** startImapd builds and starts the test IMAP server; it serves until its stdin closes. */
async function startImapd() {
	const bin = join(tmp, 'imapd')
	execFileSync('go', ['build', '-o', bin, './sidecar/internal/mailbox/mailboxtest/imapd'], { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'] })
	const ca = join(tmp, 'imap-ca.pem')
	imapd = spawn(bin, ['-ca', ca, '-user', 'alice@example.org', '-password', PASSWORD], { stdio: ['pipe', 'pipe', 'inherit'] })
	const lines = createInterface({ input: imapd.stdout })
	for await (const line of lines) {
		const m = line.match(/^port (\d+)$/)
		if (m) {
			return { ca, port: Number(m[1]) }
		}
	}
	throw new Error('imapd exited before it was ready')
}

/** sql reads the sidecar's database with Debian's sqlite3. */
function sql(query) {
	return execFileSync('sqlite3', ['-bail', '-cmd', '.timeout 10000', sidecar.dbPath, query], { stdio: ['ignore', 'pipe', 'pipe'] }).toString()
}

before(async () => {
	for (const f of ['js/istota-personal-settings.mjs', 'bin/istota']) {
		assert.ok(existsSync(join(repoRoot, f)), `${f} is missing: run make js build`)
	}
	await mkdir(shots, { recursive: true })
	tmp = await mkdtemp(join(tmpdir(), 'istota-mailbox-browser-'))
	const { ca, port } = await startImapd()
	imapPort = port
	harness = await startHarness({ repoRoot })
	bobHarness = await startHarness({ repoRoot, user: { uid: 'bob', displayName: 'Bob', email: 'bob@example.org', isAdmin: false } })
	sidecar = await startSidecar({
		repoRoot,
		nextcloudUrl: harness.url,
		extraToml: `[network]\nallow_private = ["127.0.0.1:${port}"]\n`,
		env: { SSL_CERT_FILE: ca },
	})
	harness.setSidecar(sidecar.url, sidecar.secret)
	bobHarness.setSidecar(sidecar.url, sidecar.secret)
	browser = await chromium.launch({ executablePath: chromiumPath, headless: true, args: ['--no-sandbox'] })
})

after(async () => {
	await browser?.close()
	if (sidecar && process.exitCode) {
		process.stderr.write(`--- sidecar log (tail) ---\n${sidecar.logs().slice(-4000)}\n`)
	}
	await sidecar?.stop()
	await harness?.close()
	await bobHarness?.close()
	imapd?.stdin.end()
	if (tmp) {
		await rm(tmp, { recursive: true, force: true })
	}
})

/** openPage opens the personal page of h's user and records every answer the page got. */
async function openPage(h) {
	const context = await browser.newContext({ viewport: { width: 1200, height: 900 } })
	const page = await context.newPage()
	const errors = []
	const bodies = []
	page.on('pageerror', (err) => errors.push(err.message))
	page.on('response', async (res) => {
		try {
			bodies.push(await res.text())
		} catch {
			// a redirect or an aborted request has no body
		}
	})
	await page.goto(`${h.url}/settings/user/istota?theme=light`)
	const section = page.locator('[data-test="mailbox"]')
	await section.waitFor({ timeout: WAIT })
	return { page, context, errors, bodies, section }
}

test('connect, test and disconnect a mailbox; the password goes nowhere but the sidecar', async () => {
	const { page, context, errors, bodies, section } = await openPage(harness)
	try {
		const form = section.locator('[data-test="mailbox-form"]')
		await form.waitFor({ timeout: WAIT })
		await form.getByLabel('IMAP server', { exact: true }).fill('127.0.0.1')
		await form.getByLabel('Port', { exact: true }).fill(String(imapPort))
		await form.getByLabel('User name', { exact: true }).fill('alice@example.org')

		// A wrong password: the server's refusal shows at the password field, which is emptied.
		const password = form.getByLabel('Password', { exact: true })
		await password.fill(WRONG)
		await form.locator('[data-test="mailbox-connect"]').click()
		await section.getByText('refused the user name "alice@example.org" or the password').waitFor({ timeout: WAIT })
		assert.equal(await password.inputValue(), '')
		await page.screenshot({ path: join(shots, 'mailbox-refused.png'), fullPage: true })
		assert.equal(sql(`SELECT COUNT(*) FROM user_credentials WHERE user_id = 'alice'`).trim(), '0', 'nothing stored after a refused login')

		// The right one: connected, with what the inbox holds.
		await password.fill(PASSWORD)
		await form.locator('[data-test="mailbox-connect"]').click()
		const status = section.locator('[data-test="mailbox-status"]')
		await status.getByText('Connected as alice@example.org').waitFor({ timeout: WAIT })
		await status.getByText('3 messages in the inbox, 2 unread').waitFor({ timeout: WAIT })
		await page.screenshot({ path: join(shots, 'mailbox-connected.png'), fullPage: true })
		assert.deepEqual(await layoutProblems(page, { root: '#istota-personal-settings' }), [])

		await section.locator('[data-test="mailbox-test"]').click()
		await status.locator('[data-test="mailbox-ok"]').waitFor({ timeout: WAIT })

		// Sealed in the database, never in clear.
		const stored = sql(`SELECT value FROM user_credentials WHERE user_id = 'alice' AND name = 'mailbox.password'`)
		assert.match(stored, /^v1:/)
		assert.ok(!sql('SELECT value FROM user_settings').includes(PASSWORD))

		// A fresh page load shows the account, never the password.
		await page.reload()
		await section.locator('[data-test="mailbox-status"]').getByText('Connected as alice@example.org').waitFor({ timeout: WAIT })
		assert.ok(!(await page.content()).includes(PASSWORD), 'the page holds the password')
		for (const b of bodies) {
			assert.ok(!b.includes(PASSWORD) && !b.includes(WRONG), 'an answer to the page carries a password')
		}

		// Bob, on his own page, has no mailbox and cannot see alice's.
		const bob = await openPage(bobHarness)
		try {
			await bob.section.locator('[data-test="mailbox-form"]').waitFor({ timeout: WAIT })
			assert.equal(await bob.section.locator('[data-test="mailbox-status"]').count(), 0)
			assert.ok(!(await bob.page.content()).includes('alice@example.org at'), 'bob sees alice\'s account')
		} finally {
			await bob.context.close()
		}

		// Disconnect: the form is back and the sealed value is gone.
		await section.locator('[data-test="mailbox-disconnect"]').click()
		await section.locator('[data-test="mailbox-form"]').waitFor({ timeout: WAIT })
		assert.equal(sql(`SELECT COUNT(*) FROM user_credentials WHERE user_id = 'alice'`).trim(), '0')
		assert.equal(sql(`SELECT COUNT(*) FROM user_settings WHERE user_id = 'alice' AND key = 'mailbox'`).trim(), '0')

		assert.ok(!sidecar.logs().includes(PASSWORD) && !sidecar.logs().includes(WRONG), 'the sidecar logged a password')
		assert.deepEqual(errors, [])
	} finally {
		await context.close()
	}
})

test('an unreachable or private server is refused with a clear message', async () => {
	const { context, section } = await openPage(harness)
	try {
		const form = section.locator('[data-test="mailbox-form"]')
		await form.waitFor({ timeout: WAIT })
		await form.getByLabel('IMAP server', { exact: true }).fill('127.0.0.1')
		// A loopback port the admin did not allow.
		await form.getByLabel('Port', { exact: true }).fill(String(imapPort === 65535 ? 65534 : imapPort + 1))
		await form.getByLabel('User name', { exact: true }).fill('alice@example.org')
		await form.getByLabel('Password', { exact: true }).fill(PASSWORD)
		await form.locator('[data-test="mailbox-connect"]').click()
		await section.getByText('network.allow_private').first().waitFor({ timeout: WAIT })
		assert.equal(sql(`SELECT COUNT(*) FROM user_credentials WHERE user_id = 'alice'`).trim(), '0')
	} finally {
		await context.close()
	}
})
