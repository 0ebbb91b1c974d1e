/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * The admin section: sidecar health and the AdminSettings form with field-level errors.
 */
import { reactive } from 'vue'
import * as adminApi from '../api/admin.js'

/** Every field of the form, as the contract's dotted names, grouped for the page. */
export const ADMIN_FIELDS = Object.freeze({
	access: ['access.users', 'access.groups', 'access.admin_users', 'access.admin_groups'],
	sandbox: ['sandbox.enabled', 'sandbox.admin_db_write', 'sandbox.memory_mb', 'sandbox.max_processes', 'sandbox.max_open_files', 'sandbox.cpu_seconds'],
	network: ['network.allowed_hosts'],
	brain: ['brain.kind', 'brain.model', 'brain.api_base_url', 'brain.api_key', 'brain.oauth_token', 'brain.daily_token_budget'],
	approvals: ['approvals.read', 'approvals.write_own', 'approvals.external', 'approvals.admin', 'approvals.timeout_seconds'],
	limits: ['workers.max', 'workers.reserved_interactive', 'limits.task_timeout_seconds', 'limits.retention_days', 'limits.history_days'],
})

const LIST_FIELDS = new Set(['access.users', 'access.groups', 'access.admin_users', 'access.admin_groups', 'network.allowed_hosts'])
const NUMBER_FIELDS = new Set(['sandbox.memory_mb', 'sandbox.max_processes', 'sandbox.max_open_files', 'sandbox.cpu_seconds', 'brain.daily_token_budget', 'workers.max', 'workers.reserved_interactive', 'limits.task_timeout_seconds', 'limits.retention_days', 'limits.history_days', 'approvals.timeout_seconds'])
const BOOL_FIELDS = new Set(['sandbox.enabled', 'sandbox.admin_db_write'])
/** Write-only secrets: never prefilled, sent only when typed or cleared. */
const SECRET_FIELDS = new Set(['brain.api_key', 'brain.oauth_token'])

function get(obj, dotted) {
	return dotted.split('.').reduce((o, k) => (o && typeof o === 'object' ? o[k] : undefined), obj)
}

function set(obj, dotted, value) {
	const keys = dotted.split('.')
	let o = obj
	for (const k of keys.slice(0, -1)) {
		o[k] = o[k] && typeof o[k] === 'object' ? o[k] : {}
		o = o[k]
	}
	o[keys[keys.length - 1]] = value
}

/**
 * toForm turns AdminSettings into flat form values: lists become one entry per line,
 * numbers strings, so that a half-typed value stays what the admin typed.
 *
 * @param {object} settings AdminSettings
 * @return {Object<string, any>}
 */
export function toForm(settings) {
	const form = {}
	for (const name of Object.values(ADMIN_FIELDS).flat()) {
		const v = get(settings, name)
		if (SECRET_FIELDS.has(name)) {
			form[name] = '' // write-only: never prefilled
		} else if (LIST_FIELDS.has(name)) {
			form[name] = Array.isArray(v) ? v.join('\n') : ''
		} else if (NUMBER_FIELDS.has(name)) {
			form[name] = v === undefined || v === null ? '' : String(v)
		} else if (BOOL_FIELDS.has(name)) {
			form[name] = Boolean(v)
		} else {
			form[name] = v === undefined || v === null ? '' : String(v)
		}
	}
	return form
}

/**
 * parseList splits a textarea into entries: one per line or comma, trimmed, no empties.
 *
 * @param {string} text the textarea
 * @return {Array<string>}
 */
export function parseList(text) {
	return String(text || '').split(/[\n,]/).map((s) => s.trim()).filter((s) => s !== '')
}

/**
 * toPatch is the partial AdminSettings for what differs from `saved`. A number field
 * that is not a whole number is sent as typed so that the sidecar names the field.
 * The API key and the subscription token are sent only when typed (or explicitly cleared
 * with clearApiKey / clearOauthToken).
 *
 * @param {Object<string, any>} form the form values
 * @param {Object<string, any>} saved the form values as loaded
 * @param {object} [o] options
 * @param {boolean} [o.clearApiKey] remove the stored key
 * @param {boolean} [o.clearOauthToken] remove the stored subscription token
 * @return {object}
 */
export function toPatch(form, saved, { clearApiKey = false, clearOauthToken = false } = {}) {
	const patch = {}
	const clear = { 'brain.api_key': clearApiKey, 'brain.oauth_token': clearOauthToken }
	for (const name of Object.values(ADMIN_FIELDS).flat()) {
		if (SECRET_FIELDS.has(name)) {
			if (form[name] !== '') {
				set(patch, name, form[name])
			} else if (clear[name]) {
				set(patch, name, '')
			}
			continue
		}
		if (LIST_FIELDS.has(name)) {
			const now = parseList(form[name])
			if (JSON.stringify(now) !== JSON.stringify(parseList(saved[name]))) {
				set(patch, name, now)
			}
		} else if (NUMBER_FIELDS.has(name)) {
			const raw = String(form[name]).trim()
			if (raw !== String(saved[name]).trim()) {
				set(patch, name, /^-?\d+$/.test(raw) ? Number(raw) : raw)
			}
		} else if (form[name] !== saved[name]) {
			set(patch, name, form[name])
		}
	}
	return patch
}

/**
 * createAdminStore makes the store.
 *
 * @param {object} [api] the admin API module
 * @return {object} state and actions
 */
export function createAdminStore(api = adminApi) {
	const state = reactive({
		health: null,
		healthError: null,
		healthLoading: false,
		loaded: false,
		settingsError: null,
		saving: false,
		savedOk: false,
		saveError: null,
		fieldErrors: {},
		restartRequired: [],
		apiKeySet: false,
		clearApiKey: false,
		oauthTokenSet: false,
		clearOauthToken: false,
		login: 'none',
		form: {},
		saved: {},
	})

	function apply(res) {
		const form = toForm(res.settings || {})
		state.form = form
		state.saved = { ...form }
		state.apiKeySet = Boolean(res.settings?.brain?.api_key_set)
		state.clearApiKey = false
		state.oauthTokenSet = Boolean(res.settings?.brain?.oauth_token_set)
		state.clearOauthToken = false
		state.login = res.settings?.brain?.login || 'none'
		state.restartRequired = res.restart_required || []
	}

	async function loadHealth() {
		state.healthLoading = true
		try {
			state.health = await api.getHealth()
			state.healthError = null
		} catch (err) {
			state.healthError = err
		} finally {
			state.healthLoading = false
		}
	}

	async function loadSettings() {
		try {
			apply(await api.getAdminSettings())
			state.settingsError = null
			state.loaded = true
		} catch (err) {
			state.settingsError = err
		}
	}

	async function save() {
		state.fieldErrors = {}
		state.saveError = null
		state.savedOk = false
		const patch = toPatch(state.form, state.saved, { clearApiKey: state.clearApiKey, clearOauthToken: state.clearOauthToken })
		if (Object.keys(patch).length === 0) {
			state.savedOk = true
			return
		}
		state.saving = true
		try {
			apply(await api.putAdminSettings(patch))
			state.savedOk = true
		} catch (err) {
			if (err.code === 'invalid_settings') {
				state.fieldErrors = { ...err.fields }
			}
			state.saveError = err
		} finally {
			state.saving = false
		}
	}

	/**
	 * unplacedErrors are field errors for names the form has no input for.
	 *
	 * @return {Array<[string, string]>}
	 */
	function unplacedErrors() {
		const known = new Set(Object.values(ADMIN_FIELDS).flat())
		return Object.entries(state.fieldErrors).filter(([k]) => !known.has(k))
	}

	return { state, loadHealth, loadSettings, save, unplacedErrors }
}
