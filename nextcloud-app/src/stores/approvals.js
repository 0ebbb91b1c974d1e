/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 *
 * The Approvals section's state: the agent's questions that wait for the user, the
 * latest answered ones, and the user's policies per risk tier.
 */
import { reactive } from 'vue'
import * as personalApi from '../api/personal.js'

/** The risk tiers, mildest first, as the service names them. */
export const TIERS = Object.freeze(['read', 'write_own', 'external', 'admin'])

/** Policies, mildest first. */
export const POLICIES = Object.freeze(['allow', 'ask', 'deny'])

/**
 * stricterChoices is what a user may choose for a tier whose administrator default is
 * adminPolicy: following it (''), or anything at least as strict.
 *
 * @param {string} adminPolicy allow, ask or deny
 * @return {string[]} '' and the policies from adminPolicy on
 */
export function stricterChoices(adminPolicy) {
	const from = Math.max(0, POLICIES.indexOf(adminPolicy))
	return ['', ...POLICIES.slice(from)]
}

/**
 * createApprovalsStore makes the store.
 *
 * @param {object} [api] getApprovals, decideApproval, putApprovalPolicies
 * @return {object} state and actions
 */
export function createApprovalsStore(api = personalApi) {
	const state = reactive({
		loaded: false,
		error: null,
		pending: [],
		recent: [],
		policies: { admin: {}, user: {}, effective: {} },
		draft: {},
		timeoutSeconds: 0,
		busy: {},
		actionError: null,
		saving: false,
		saveError: null,
		savedOk: false,
	})

	function apply(a) {
		state.pending = Array.isArray(a.pending) ? a.pending : []
		// The service's recent list starts with the open questions, which are listed above.
		state.recent = Array.isArray(a.recent) ? a.recent.filter((r) => r.status !== 'pending') : []
		applyPolicies(a.policies)
		state.timeoutSeconds = Number(a.timeout_seconds) || 0
	}

	function applyPolicies(p) {
		state.policies = { admin: { ...(p?.admin || {}) }, user: { ...(p?.user || {}) }, effective: { ...(p?.effective || {}) } }
		state.draft = Object.fromEntries(TIERS.map((tier) => [tier, state.policies.user[tier] || '']))
	}

	async function load() {
		try {
			apply(await api.getApprovals())
			state.error = null
			state.loaded = true
		} catch (err) {
			state.error = err
		}
	}

	/**
	 * decide answers question id; the lists are read again either way (it may have been
	 * answered in Talk meanwhile).
	 *
	 * @param {number} id the question
	 * @param {boolean} approve yes or no
	 */
	async function decide(id, approve) {
		state.busy = { ...state.busy, [id]: true }
		state.actionError = null
		try {
			await api.decideApproval(id, approve)
		} catch (err) {
			state.actionError = { id, error: err }
		} finally {
			const { [id]: _, ...rest } = state.busy
			state.busy = rest
		}
		await load()
	}

	/** dirty is whether the policy choices differ from the stored ones. */
	function dirty() {
		return TIERS.some((tier) => (state.draft[tier] || '') !== (state.policies.user[tier] || ''))
	}

	async function savePolicies() {
		state.saving = true
		state.saveError = null
		state.savedOk = false
		try {
			applyPolicies(await api.putApprovalPolicies({ ...state.draft }))
			state.savedOk = true
		} catch (err) {
			state.saveError = err
		} finally {
			state.saving = false
		}
	}

	return { state, load, decide, dirty, savePolicies }
}
