/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * The personal and admin sections in Debian's Chromium inside a real Nextcloud: the
 * "pages" step of sidecar/e2e/realnc runs it (`node nextcloud-pages.mjs`) after the app
 * is installed and users have talked to the bot. Each section is opened at a desktop
 * and a narrow width; it must mount, show the user's own data and never another
 * user's, and fit Nextcloud's content area. Screenshots: nextcloud-*.png.
 *
 * The test server (../shared/nextcloud/serve.sh) has no usable login page: every
 * request carries `Authorization: Basic …`. Nextcloud redirects a page request without
 * a session to its login page rather than answering 401, so the header is sent with
 * every request instead of waiting for a challenge. The server's build also lacks
 * Nextcloud's compiled core scripts, so the page logs errors about the missing OC, OCA
 * and t globals; those are Nextcloud's and are ignored, while any error raised in or
 * logged by the app's own files (…/istota/js/…), and any failed call of its API, fails.
 * Of what those scripts provide, only OC.config (the page's own _oc_config) is stood in
 * for: @nextcloud/vue chooses its styles for the server's version from it.
 *
 * Environment:
 *   ISTOTA_NC_URL                 Nextcloud's base URL (without it this skips)
 *   ISTOTA_NC_USER, _PASSWORD     the user whose personal section is opened
 *   ISTOTA_NC_ADMIN, _PASSWORD    an administrator, for the admin section
 *   ISTOTA_PAGES_WANT             JSON list of texts the user's section must show
 *   ISTOTA_PAGES_NEVER            JSON list of other users' texts it must never show
 *   ISTOTA_PAGES_USERMD           a text the user's USER.md editor must hold
 *   ISTOTA_PAGES_NOT_RUNNING      instead of all that: the sidecar is stopped, and the admin
 *                                 section must show this `istota install` command as the
 *                                 next step (the app's 503s are then expected, nothing else)
 *   ISTOTA_SCREENSHOTS            folder for the PNGs (default build/screenshots)
 *   CHROMIUM_PATH                 the browser (default /usr/bin/chromium)
 */
import assert from 'node:assert/strict'
import { mkdir } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import { after, before, describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import { chromium } from 'playwright-core'
import { layoutProblems, screenshotAll } from './layout.mjs'

const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..')
const env = process.env
const ncUrl = (env.ISTOTA_NC_URL || '').replace(/\/+$/, '')
const shots = env.ISTOTA_SCREENSHOTS || join(repoRoot, 'build', 'screenshots')
const WIDTHS = [1280, 800]
const HEIGHT = 900
const WAIT = 60000 // generous: only for waiting, never a pass/fail figure

const list = (name) => {
	try {
		const v = JSON.parse(env[name] || '[]')
		return Array.isArray(v) ? v.map(String) : []
	} catch {
		throw new Error(`${name} is not a JSON list: ${env[name]}`)
	}
}

// The app's own files as Nextcloud serves them (apps/ or custom_apps/), and its API.
const APP_FILE = /\/istota\/js\//
const APP_API = /\/ocs\/v2\.php\/apps\/istota\//
// This server has no reverse proxy in front of the sidecar's live stream, so the
// browser logs the refused WebSocket; the page then polls, by design.
const NO_WS_PROXY = /^WebSocket connection to '[^']*\/istota-ws\/[^']*' failed/

let browser

/**
 * openSection opens one settings section as user, collecting what went wrong.
 *
 * @param {string} path the section's path below index.php
 * @param {string} user the user
 * @param {string} password the password
 * @param {number} width the window's width
 * @return {Promise<object>} page, context, appErrors (ours), ignored (Nextcloud's)
 */
async function openSection(path, user, password, width) {
	const context = await browser.newContext({
		viewport: { width, height: HEIGHT },
		extraHTTPHeaders: { Authorization: 'Basic ' + Buffer.from(`${user}:${password}`).toString('base64') },
	})
	// Nextcloud's core scripts, missing from this build, publish the server's settings
	// (the page's own _oc_config) as OC.config; @nextcloud/vue picks its styles for the
	// server's version from it. Only that piece is stood in for, so the sections look
	// as on a complete Nextcloud 31 rather than as on a newer one.
	await context.addInitScript(() => {
		if (!('OC' in window)) {
			Object.defineProperty(window, 'OC', {
				configurable: true,
				get: () => (window._oc_config ? { config: window._oc_config } : undefined),
			})
		}
	})
	const page = await context.newPage()
	const appErrors = []
	const ignored = []
	const urlsIn = (s) => String(s || '').match(/https?:\/\/[^\s)'"]+/g) || []
	page.on('pageerror', (err) => {
		// Ours when any frame of the stack is in the app's files (it may end in a library
		// bundled into them).
		const mine = urlsIn(err.stack).some((u) => APP_FILE.test(u))
		;(mine ? appErrors : ignored).push(`uncaught: ${err.message}${mine ? `\n${err.stack}` : ''}`)
	})
	page.on('console', (msg) => {
		if (msg.type() !== 'error') {
			return
		}
		const at = msg.location()?.url || ''
		const text = msg.text()
		const mine = APP_FILE.test(at) || APP_API.test(at) || urlsIn(text).some((u) => APP_FILE.test(u) || APP_API.test(u))
		if (mine && !NO_WS_PROXY.test(text)) {
			appErrors.push(`console: ${text} (${at})`)
		} else {
			ignored.push(`console: ${text.slice(0, 160)}`)
		}
	})
	page.on('response', (res) => {
		if ((APP_API.test(res.url()) || APP_FILE.test(res.url())) && res.status() >= 400) {
			appErrors.push(`HTTP ${res.status()} from ${res.request().method()} ${res.url()}`)
		}
	})
	page.on('requestfailed', (req) => {
		if (APP_API.test(req.url()) || APP_FILE.test(req.url())) {
			appErrors.push(`request failed: ${req.method()} ${req.url()}: ${req.failure()?.errorText}`)
		}
	})
	// PHP's built-in server answers one request at a time: on a busy machine a page with
	// its scripts can take longer than Playwright's 30 s default.
	const res = await page.goto(`${ncUrl}/index.php${path}`, { timeout: WAIT })
	assert.equal(res?.status(), 200, `GET ${path} as ${user}: HTTP ${res?.status()} at ${page.url()}`)
	assert.ok(!page.url().includes('/login'), `${user} was sent to the login page: ${page.url()}`)
	return { page, context, appErrors, ignored }
}

/**
 * checkErrors reports Nextcloud's own errors once and fails on ours.
 *
 * @param {import('node:test').TestContext} t the test
 * @param {object} s what openSection returned
 */
function checkErrors(t, s) {
	const distinct = [...new Set(s.ignored)]
	if (distinct.length) {
		t.diagnostic(`ignored ${s.ignored.length} error(s) of Nextcloud's own scripts (this build has no core scripts), e.g. ${distinct.slice(0, 3).join(' | ')}`)
	}
	assert.deepEqual(s.appErrors, [], 'errors of the app\'s own scripts or API')
}

async function checkLayout(page, root, what) {
	const problems = await layoutProblems(page, { root })
	assert.deepEqual(problems, [], `${what} does not fit Nextcloud's content area`)
}

before(async () => {
	await mkdir(shots, { recursive: true })
	if (ncUrl) {
		browser = await chromium.launch({ executablePath: env.CHROMIUM_PATH || '/usr/bin/chromium', headless: true, args: ['--no-sandbox'] })
	}
})

after(async () => {
	await browser?.close()
})

const notRunning = env.ISTOTA_PAGES_NOT_RUNNING || ''

describe('the admin section before the service runs', { skip: ncUrl && notRunning ? false : 'ISTOTA_NC_URL or ISTOTA_PAGES_NOT_RUNNING is not set' }, () => {
	const admin = env.ISTOTA_NC_ADMIN || 'admin'
	const adminPassword = env.ISTOTA_NC_ADMIN_PASSWORD || ''
	test('shows the install command instead of an error', async (t) => {
		const s = await openSection('/settings/admin/istota', admin, adminPassword, WIDTHS[0])
		const { page } = s
		try {
			const root = '#istota-admin-settings'
			await page.locator(`${root} [data-test="install-next-step"]`).waitFor({ timeout: WAIT })
			assert.equal((await page.locator(`${root} [data-test="install-command"]`).innerText()).trim(), notRunning)
			assert.equal(await page.locator(`${root} .istota-error`).count(), 0, 'an error beside the next step')
			await page.locator(`${root} [data-test="settings-not-running"]`).waitFor({ timeout: WAIT })
			await page.locator(`${root} [data-test="pairing"]`).getByText(notRunning).waitFor({ timeout: WAIT })
			await screenshotAll(page, join(shots, 'nextcloud-admin-not-running.png'))
			await checkLayout(page, root, 'the admin section before the service runs')
			// The app's API answers 503 while nothing listens (and the browser logs each):
			// expected here; anything else of the app's is not.
			s.appErrors = s.appErrors.filter((e) => !/\b503\b/.test(e))
			checkErrors(t, s)
		} finally {
			await s.context.close()
		}
	})
})

describe('the sections inside a real Nextcloud', { skip: ncUrl && !notRunning ? false : 'ISTOTA_NC_URL is not set (or ISTOTA_PAGES_NOT_RUNNING is): run through `make test-nextcloud`' }, () => {
	const user = env.ISTOTA_NC_USER || 'alice'
	const password = env.ISTOTA_NC_USER_PASSWORD || ''
	const admin = env.ISTOTA_NC_ADMIN || 'admin'
	const adminPassword = env.ISTOTA_NC_ADMIN_PASSWORD || ''
	const want = list('ISTOTA_PAGES_WANT')
	const never = list('ISTOTA_PAGES_NEVER')
	const userMd = env.ISTOTA_PAGES_USERMD || ''

	for (const width of WIDTHS) {
		test(`personal section of ${user} at ${width} px`, async (t) => {
			const s = await openSection('/settings/user/istota', user, password, width)
			const { page } = s
			try {
				const root = '#istota-personal-settings'
				await page.locator(`${root} [data-test="personal"]`).waitFor({ timeout: WAIT })
				// Her own data, once every part of the section has loaded.
				await page.locator(`${root} [data-test="recent"]`).waitFor({ timeout: WAIT })
				await page.locator(`${root} [data-test="settings"]`).waitFor({ timeout: WAIT })
				await page.locator(`${root} .istota-schedule h3`).first().waitFor({ timeout: WAIT })
				for (const text of want) {
					await page.waitForFunction(([sel, text]) => document.querySelector(sel)?.innerText.includes(text), [root, text], { timeout: WAIT })
						.catch(() => assert.fail(`the section never shows ${JSON.stringify(text)}`))
				}
				if (userMd) {
					await page.waitForFunction(([sel, text]) => document.querySelector(`${sel} [data-test="usermd"] textarea`)?.value.includes(text), [root, userMd], { timeout: WAIT })
						.catch(() => assert.fail(`the USER.md editor never holds ${JSON.stringify(userMd)}`))
				}
				// …and nobody else's, in the text or in any field.
				const shown = await page.evaluate((sel) => {
					const el = document.querySelector(sel)
					return [el.innerText, ...[...el.querySelectorAll('input, textarea')].map((f) => f.value)].join('\n')
				}, root)
				for (const text of never) {
					assert.ok(!shown.includes(text), `${user}'s section shows another user's ${JSON.stringify(text)}`)
				}
				// Conversations carry names people read, never Talk's raw one-to-one name.
				const names = await page.locator(`${root} .istota-memory summary`).allInnerTexts()
				for (const name of names) {
					assert.ok(!/^\[".*"\]$/.test(name.trim()), `a conversation is named ${name}`)
				}
				await screenshotAll(page, join(shots, `nextcloud-personal-${width}.png`))
				if (width === WIDTHS[0]) {
					await page.locator(`${root} [data-test="recent"]`).screenshot({ path: join(shots, `nextcloud-personal-recent-${width}.png`) })
				}
				await checkLayout(page, root, `${user}'s section at ${width} px`)
				checkErrors(t, s)
			} finally {
				await s.context.close()
			}
		})

		test(`admin section at ${width} px`, async (t) => {
			const s = await openSection('/settings/admin/istota', admin, adminPassword, width)
			const { page } = s
			try {
				const root = '#istota-admin-settings'
				await page.locator(`${root} [data-test="admin"]`).waitFor({ timeout: WAIT })
				// Health from the sidecar, and the stored settings in the form.
				await page.locator(`${root} [data-test="version"]`).waitFor({ timeout: WAIT })
				assert.match(await page.locator(`${root} [data-test="queue"]`).innerText(), /waiting/)
				assert.match(await page.locator(`${root} [data-test="workers"]`).innerText(), /busy/)
				assert.equal(await page.locator(`${root} [data-test="sandbox-ok"], ${root} [data-test="sandbox-error"]`).count(), 1)
				await page.locator(`${root} [data-test="admin-settings"]`).waitFor({ timeout: WAIT })
				assert.match(await page.locator(`${root} [data-field="workers.max"] input`).inputValue(), /^[1-9]\d*$/)
				await screenshotAll(page, join(shots, `nextcloud-admin-${width}.png`))
				await checkLayout(page, root, `the admin section at ${width} px`)
				checkErrors(t, s)
			} finally {
				await s.context.close()
			}
		})
	}
})
