/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * The built settings pages (js/*.mjs) in Debian's Chromium, driven by playwright-core,
 * mounted in the harness page and talking through the harness "app" to a real sidecar
 * (`bin/istota serve`). Screenshots go to build/screenshots/.
 *
 * Run with `make test-browser` (builds the sidecar and the pages first).
 */
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { mkdir, readFile, writeFile } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { after, before, describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import { chromium } from 'playwright-core'
import { startHarness } from './harness/server.mjs'
import { freePort, startSidecar } from './harness/sidecar.mjs'
import { layoutProblems } from './layout.mjs'

const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..')
const shots = join(repoRoot, 'build', 'screenshots')
const chromiumPath = process.env.CHROMIUM_PATH || '/usr/bin/chromium'
const THEMES = ['light', 'dark']
const WAIT = 30000 // generous: only for waiting, never a pass/fail figure

let harness
let sidecar
let browser

/** sql runs statements against the sidecar's database with Debian's sqlite3. */
function sql(statements) {
	execFileSync('sqlite3', ['-bail', '-cmd', '.timeout 10000', sidecar.dbPath, statements], { stdio: ['ignore', 'pipe', 'pipe'] })
}

const ts = (d) => d.toISOString().replace('T', ' ').replace('Z', '').slice(0, 23)

function talkEvent(token, id, text, { conversationName = 'Team', type = 2, userCount = 3 } = {}) {
	return {
		bot_url: 'nextcloudapp://istota',
		event: {
			type: 'Create',
			actor: { type: 'Person', id: 'users/alice', name: 'Alice', talkParticipantType: '3' },
			object: { type: 'Note', id: String(id), name: 'message', content: JSON.stringify({ message: text, parameters: [] }), mediaType: 'text/markdown' },
			target: { type: 'Collection', id: token, name: conversationName },
		},
		sender: { uid: 'alice', display_name: 'Alice', email: 'alice@example.org', timezone: 'Europe/Berlin', language: 'en', is_admin: true, allowed: true },
		conversation: { token, name: conversationName, type, user_count: userCount, private: false },
		received_at: new Date().toISOString(),
	}
}

async function openPage(kind, theme) {
	const context = await browser.newContext({ viewport: { width: 1200, height: 900 }, colorScheme: theme })
	const page = await context.newPage()
	const errors = []
	page.on('pageerror', (err) => errors.push(err.message))
	const path = kind === 'admin' ? '/settings/admin/istota' : '/settings/user/istota'
	await page.goto(`${harness.url}${path}?theme=${theme}`)
	return { page, context, errors }
}

async function shot(page, name) {
	await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true })
}

before(async () => {
	for (const f of ['js/istota-personal-settings.mjs', 'js/istota-admin-settings.mjs', 'bin/istota']) {
		assert.ok(existsSync(join(repoRoot, f)), `${f} is missing: run make js build`)
	}
	await mkdir(shots, { recursive: true })
	harness = await startHarness({ repoRoot })
	sidecar = await startSidecar({ repoRoot, nextcloudUrl: harness.url })
	harness.setSidecar(sidecar.url, sidecar.secret)

	// Alice as the app announces her on page load, and a message she wrote in a group
	// conversation the bot is in (logged, not addressed: no task).
	const [status] = await harness.sidecarPost('/v1/users/alice/session', { display_name: 'Alice', email: 'alice@example.org', timezone: 'Europe/Berlin', language: 'en', groups: ['staff'], is_admin: true })
	assert.equal(status, 200, 'session call')
	const [evStatus, ev] = await harness.sidecarPost('/v1/talk/events', talkEvent('team1234', 41, 'Lunch at noon?'))
	assert.equal(evStatus, 200, `talk event: ${JSON.stringify(ev)}`)

	// Her files as she would edit them in Files.
	const config = join(sidecar.userDir('alice'), 'istota', 'config')
	await mkdir(config, { recursive: true })
	await writeFile(join(config, 'USER.md'), '# Alice\n\n- prefers short answers\n')
	await writeFile(join(config, 'CRON.md'), [
		'# Scheduled jobs', '', '```toml',
		'[[jobs]]', 'name = "morning-news"', 'schedule = "0 7 * * *"', 'prompt = "Summarise the news for me"', '',
		'[[jobs]]', 'name = "weekly-review"', 'schedule = "0 17 * * 5"', 'prompt = "Review my week"', '```', '',
	].join('\n'))

	// Finished work with usage, and a task that is running now with progress.
	const now = Date.now()
	const at = (minutesAgo) => ts(new Date(now - minutesAgo * 60000))
	const lease = ts(new Date(now + 3600 * 1000))
	// A request and an answer with long links, which do not wrap by themselves.
	const longRequest = 'Read https://example.org/reports/' + 'quarterly-figures-and-projections-'.repeat(4) + 'final.pdf and summarise it for the board, ' + 'with every number checked twice, '.repeat(3)
	const longResult = 'Summary ready: ' + 'see-https://example.org/summary/'.repeat(4) + ' ' + 'figures are up and costs are down, '.repeat(8)
	sql(`
INSERT INTO tasks (user_id, source, status, prompt, conversation_token, next_attempt_at, result, input_tokens, output_tokens, cost_usd, created_at, started_at, finished_at)
VALUES ('alice', 'talk', 'completed', 'Summarise my inbox', 'note1', '${at(30)}', 'You have 3 new mails about the offsite.', 1200, 340, 0.0123, '${at(30)}', '${at(30)}', '${at(29)}');
INSERT INTO tasks (user_id, source, status, prompt, conversation_token, next_attempt_at, result, input_tokens, output_tokens, created_at, started_at, finished_at)
VALUES ('alice', 'talk', 'completed', '${longRequest}', 'note1', '${at(25)}', '${longResult}', 900, 120, '${at(25)}', '${at(25)}', '${at(24)}');
INSERT INTO tasks (user_id, source, status, prompt, next_attempt_at, error, created_at, started_at, finished_at)
VALUES ('alice', 'cron', 'failed', 'Check the build', '${at(20)}', 'The model API could not be reached.', '${at(20)}', '${at(20)}', '${at(19)}');
INSERT INTO usage (at, user_id, task_id, model, input_tokens, output_tokens, requests, cost_usd)
VALUES ('${at(29)}', 'alice', 1, 'claude-test', 1200, 340, 2, 0.0123);
INSERT INTO tasks (user_id, source, status, prompt, conversation_token, next_attempt_at, lease_owner, lease_until, created_at, started_at)
VALUES ('alice', 'talk', 'running', 'Plan my trip to Lisbon', 'note1', '${at(1)}', 'browser-test-worker', '${lease}', '${at(1)}', '${at(1)}');
INSERT INTO task_events (task_id, seq, at, kind, text) SELECT id, 1, '${at(1)}', 'progress', 'Looking at your calendar' FROM tasks WHERE prompt = 'Plan my trip to Lisbon';
INSERT INTO task_events (task_id, seq, at, kind, text) SELECT id, 2, '${at(0)}', 'tool', 'Read USER.md' FROM tasks WHERE prompt = 'Plan my trip to Lisbon';
`)
	browser = await chromium.launch({ executablePath: chromiumPath, headless: true, args: ['--no-sandbox'] })
})

after(async () => {
	await browser?.close()
	if (sidecar && process.exitCode) {
		process.stderr.write(`--- sidecar log (tail) ---\n${sidecar.logs().slice(-4000)}\n`)
	}
	await sidecar?.stop()
	await harness?.close()
})

describe('personal page', () => {
	for (const theme of THEMES) {
		test(`status and usage render (${theme})`, async () => {
			const { page, context, errors } = await openPage('personal', theme)
			try {
				const running = page.locator('[data-test="running"]')
				await running.waitFor({ timeout: WAIT })
				await running.getByText('Plan my trip to Lisbon').waitFor({ timeout: WAIT })
				await running.getByText('Read USER.md').waitFor({ timeout: WAIT })
				// The socket through the proxied path opened with the app's token.
				await page.locator('[data-test="live-mode"]', { hasText: 'live' }).waitFor({ timeout: WAIT })
				const recent = page.locator('[data-test="recent"]')
				await recent.getByText('You have 3 new mails about the offsite.').waitFor({ timeout: WAIT })
				// Only the kind of failure reaches the user, never the internal reason.
				await recent.getByText('the request could not be completed').waitFor({ timeout: WAIT })
				assert.equal(await recent.getByText('The model API could not be reached.').count(), 0)
				// How long history is kept (memory.history_days, 180 by default).
				assert.match(await page.locator('[data-test="history-kept"]').innerText(), /kept for 180 days, then deleted/)
				const today = await page.locator('[data-period="today"]').innerText()
				assert.match(today, /1,540 tokens/, today)
				assert.match(today, /\$0\.0123/, today)
				// The conversation Alice wrote in is listed under memory.
				await page.locator('summary', { hasText: 'Team' }).waitFor({ timeout: WAIT })
				const bg = await page.evaluate(() => getComputedStyle(document.body).backgroundColor)
				assert.equal(bg, theme === 'dark' ? 'rgb(23, 23, 23)' : 'rgb(255, 255, 255)')
				await shot(page, `personal-status-${theme}`)
				// The long request and answer stay inside the content area, clamped.
				await recent.getByText('quarterly-figures').first().waitFor({ timeout: WAIT })
				assert.deepEqual(await layoutProblems(page, { root: '#istota-personal-settings' }), [])
				assert.deepEqual(errors, [])
			} finally {
				await context.close()
			}
		})
	}

	test('USER.md: save, then a conflict with an edit made in Files, then reload', async () => {
		const { page, context, errors } = await openPage('personal', 'light')
		try {
			const editor = page.locator('[data-test="usermd"] textarea')
			await editor.waitFor({ timeout: WAIT })
			await page.waitForFunction(() => document.querySelector('[data-test="usermd"] textarea')?.value.includes('prefers short answers'), null, { timeout: WAIT })
			await editor.fill('# Alice\n\n- prefers short answers\n- drinks tea\n')
			await page.locator('[data-test="usermd-save"]').click()
			await page.locator('[data-test="usermd"] [role="status"]', { hasText: 'Saved' }).waitFor({ timeout: WAIT })
			const onDisk = await readFile(join(sidecar.userDir('alice'), 'istota', 'config', 'USER.md'), 'utf8')
			assert.match(onDisk, /drinks tea/)

			// Alice changes the file in Files meanwhile; her next save from the page conflicts.
			await writeFile(join(sidecar.userDir('alice'), 'istota', 'config', 'USER.md'), '# Alice\n\n- edited in Files\n')
			await editor.fill('# Alice\n\n- edited on the page\n')
			await page.locator('[data-test="usermd-save"]').click()
			const conflict = page.locator('[data-test="conflict"]')
			await conflict.waitFor({ timeout: WAIT })
			await shot(page, 'personal-usermd-conflict-light')
			assert.equal(await editor.inputValue(), '# Alice\n\n- edited on the page\n', 'the draft is kept')
			await page.locator('[data-test="conflict-reload"]').click()
			await conflict.waitFor({ state: 'detached', timeout: WAIT })
			assert.equal(await editor.inputValue(), '# Alice\n\n- edited in Files\n')
			assert.deepEqual(errors, [])
		} finally {
			await context.close()
		}
	})

	test('scheduled jobs: disable and enable a CRON.md job', async () => {
		const { page, context, errors } = await openPage('personal', 'dark')
		try {
			const row = page.locator('[data-job="morning-news"]')
			// The sidecar syncs CRON.md once a minute: reload until the job is there. Each
			// look waits for the section to have loaded (its headings appear only then),
			// or the count would read a page still loading.
			const loaded = () => page.locator('.istota-schedule h3').first().waitFor({ timeout: WAIT })
			const deadline = Date.now() + 150000
			await loaded()
			while (!(await row.count())) {
				assert.ok(Date.now() < deadline, 'CRON.md was not synced in time')
				await page.waitForTimeout(3000)
				await page.reload()
				await page.locator('.istota-schedule').waitFor({ timeout: WAIT })
				await loaded()
			}
			assert.equal(await row.getAttribute('data-enabled'), 'true')
			await row.locator('[data-test="job-disable"]').click()
			await page.locator('[data-job="morning-news"][data-enabled="false"]').waitFor({ timeout: WAIT })
			await shot(page, 'personal-jobs-dark')
			await page.locator('[data-job="morning-news"] [data-test="job-enable"]').click()
			await page.locator('[data-job="morning-news"][data-enabled="true"]').waitFor({ timeout: WAIT })
			// Survives a reload: it was stored by the sidecar, not only shown.
			await page.reload()
			await page.locator('[data-job="morning-news"][data-enabled="true"]').waitFor({ timeout: WAIT })
			assert.deepEqual(errors, [])
		} finally {
			await context.close()
		}
	})

	test('approvals: answer a question on the page, make a policy stricter', async () => {
		const now = Date.now()
		sql(`INSERT INTO approvals (task_id, user_id, tier, kind, name, summary, fingerprint, ask_token, created_at, expires_at)
SELECT id, 'alice', 'external', 'skill', 'email send', 'Send an e-mail to bob@example.org, subject "Offsite", 3 lines: See you there', 'fp-browser-1', 'note1', '${ts(new Date(now))}', '${ts(new Date(now + 1800 * 1000))}'
FROM tasks WHERE prompt = 'Plan my trip to Lisbon';`)
		const { page, context, errors } = await openPage('personal', 'light')
		try {
			const pending = page.locator('[data-test="approvals-pending"] [data-approval]')
			await pending.first().waitFor({ timeout: WAIT })
			assert.match(await pending.first().innerText(), /Send an e-mail to bob@example\.org, subject "Offsite"/)
			await shot(page, 'personal-approvals-light')
			assert.deepEqual(await layoutProblems(page, { root: '#istota-personal-settings' }), [])
			await pending.first().locator('[data-test="approve"]').click()
			await page.locator('[data-test="approvals-none"]').waitFor({ timeout: WAIT })
			await page.locator('[data-test="approvals-recent"] tr[data-status="approved"]', { hasText: 'Yes, on this page' }).waitFor({ timeout: WAIT })

			// The administrator asks before external actions: "allow" is not offered.
			const external = page.locator('select[data-policy="external"]')
			const offered = await external.locator('option').evaluateAll((opts) => opts.map((o) => o.value))
			assert.deepEqual(offered, ['', 'ask', 'deny'])
			await external.selectOption('deny')
			await page.locator('[data-test="policies-save"]').click()
			await page.locator('[data-test="policies-saved"]').waitFor({ timeout: WAIT })
			await page.reload()
			await page.locator('select[data-policy="external"]').waitFor({ timeout: WAIT })
			assert.equal(await page.locator('select[data-policy="external"]').inputValue(), 'deny')
			assert.deepEqual(errors, [])
		} finally {
			await context.close()
		}
	})

	test('Stop ends the running task', async () => {
		const { page, context } = await openPage('personal', 'light')
		try {
			await page.locator('[data-test="running"]').waitFor({ timeout: WAIT })
			await page.locator('[data-test="stop"]').click()
			await page.locator('[data-test="idle"]').waitFor({ timeout: WAIT })
			await page.locator('[data-test="recent"] tr[data-status="cancelled"]').first().waitFor({ timeout: WAIT })
		} finally {
			await context.close()
		}
	})
})

describe('admin page', () => {
	for (const theme of THEMES) {
		test(`health and a field error on an invalid value (${theme})`, async () => {
			const { page, context, errors } = await openPage('admin', theme)
			try {
				await page.locator('[data-test="version"]').waitFor({ timeout: WAIT })
				assert.match(await page.locator('[data-test="queue"]').innerText(), /waiting/)
				assert.match(await page.locator('[data-test="workers"]').innerText(), /busy/)
				assert.equal(await page.locator('[data-test="sandbox-ok"], [data-test="sandbox-error"]').count(), 1)
				await page.locator('[data-test="pairing"]').getByText('occ istota:self-test').waitFor()

				const field = page.locator('[data-field="workers.max"]')
				await field.locator('input').fill('0')
				await page.locator('[data-test="admin-save"]').click()
				await page.locator('[data-field="workers.max"][data-invalid="true"]').waitFor({ timeout: WAIT })
				const text = await field.innerText()
				assert.ok(text.trim().length > 'Tasks running at once'.length, `no message next to the field: ${text}`)
				assert.equal(await page.locator('[data-test="admin-saved"]').count(), 0)
				await shot(page, `admin-field-error-${theme}`)
				assert.deepEqual(await layoutProblems(page, { root: '#istota-admin-settings' }), [])
				assert.deepEqual(errors, [])
			} finally {
				await context.close()
			}
		})
	}

	test('keyboard only: Tab to a field, type, Tab to Save, Enter', async () => {
		const { page, context } = await openPage('admin', 'light')
		try {
			await page.locator('[data-field="limits.retention_days"] input').waitFor({ timeout: WAIT })
			const focused = () => page.evaluate(() => {
				const el = document.activeElement
				return { field: el?.closest('[data-field]')?.getAttribute('data-field') || '', test: el?.getAttribute('data-test') || el?.closest('[data-test]')?.getAttribute('data-test') || '', tag: el?.tagName || '' }
			})
			let f
			for (let i = 0; i < 200; i++) {
				await page.keyboard.press('Tab')
				f = await focused()
				if (f.field === 'limits.retention_days' && f.tag === 'INPUT') {
					break
				}
			}
			assert.equal(f.field, 'limits.retention_days', 'Tab never reached the retention field')
			await page.keyboard.press('Control+A')
			await page.keyboard.type('90')
			for (let i = 0; i < 20; i++) {
				await page.keyboard.press('Tab')
				f = await focused()
				if (f.test === 'admin-save') {
					break
				}
			}
			assert.equal(f.test, 'admin-save', 'Tab never reached Save')
			await shot(page, 'admin-keyboard-save-focused-light')
			await page.keyboard.press('Enter')
			await page.locator('[data-test="admin-saved"]').waitFor({ timeout: WAIT })
			await page.reload()
			await page.locator('[data-field="limits.retention_days"] input').waitFor({ timeout: WAIT })
			assert.equal(await page.locator('[data-field="limits.retention_days"] input').inputValue(), '90')
		} finally {
			await context.close()
		}
	})
})

describe('sidecar down', () => {
	for (const kind of ['personal', 'admin']) {
		test(`the ${kind} page says so instead of breaking`, async () => {
			harness.setSidecar(`http://127.0.0.1:${await freePort()}`, sidecar.secret)
			const { page, context, errors } = await openPage(kind, 'light')
			try {
				const note = page.locator('.istota-error[data-code="sidecar_unavailable"]').first()
				await note.waitFor({ timeout: WAIT })
				assert.match(await note.innerText(), /Istota is not reachable/)
				await shot(page, `${kind}-sidecar-down-light`)
				assert.deepEqual(errors, [])
			} finally {
				await context.close()
				harness.setSidecar(sidecar.url, sidecar.secret)
			}
		})
	}
})
