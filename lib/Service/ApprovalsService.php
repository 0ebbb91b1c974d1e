<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

use OCA\Istota\Exception\InvalidInputException;
use OCA\Istota\Exception\SidecarException;

/**
 * ApprovalsService is the personal page's "Approvals" area: the questions the agent
 * waits on (with Approve/Deny), the latest answered ones, and the user's own policies
 * per risk tier, which may only be stricter than the admin's. The user id always comes
 * from the caller (the Nextcloud session); the sidecar refuses a question that is not
 * this user's.
 */
class ApprovalsService {
	private const TIERS = ['read', 'write_own', 'external', 'admin'];
	private const POLICIES = ['', 'allow', 'ask', 'deny'];

	public function __construct(
		private readonly SessionService $sessions,
		private readonly SidecarClient $client,
	) {
	}

	/**
	 * @return array<string, mixed> {pending, recent, policies, timeout_seconds}
	 * @throws SidecarException
	 */
	public function list(string $uid): array {
		$this->sessions->ensure($uid);
		return $this->client->getJson(SidecarClient::userPath($uid, 'approvals'));
	}

	/**
	 * @return array<string, mixed> the decided question
	 * @throws SidecarException
	 * @throws InvalidInputException
	 */
	public function decide(string $uid, int $id, bool $approve): array {
		if ($id <= 0) {
			throw new InvalidInputException('the approval id must be a positive number');
		}
		$this->sessions->ensure($uid);
		return $this->client->postJson(SidecarClient::userPath($uid, 'approvals/' . $id), ['approve' => $approve]);
	}

	/**
	 * @param array<string, mixed> $policies tier => '' | allow | ask | deny
	 * @return array<string, mixed> {admin, user, effective}
	 * @throws SidecarException
	 * @throws InvalidInputException
	 */
	public function savePolicies(string $uid, array $policies): array {
		$out = [];
		foreach ($policies as $tier => $policy) {
			if (!in_array($tier, self::TIERS, true) || !is_string($policy) || !in_array($policy, self::POLICIES, true)) {
				throw new InvalidInputException('policies are read, write_own, external and admin, each "", allow, ask or deny');
			}
			$out[$tier] = $policy;
		}
		$this->sessions->ensure($uid);
		return $this->client->putJson(SidecarClient::userPath($uid, 'approvals/policies'), $out);
	}
}
