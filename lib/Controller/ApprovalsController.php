<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Controller;

use OCA\Istota\Service\ApprovalsService;
use OCP\AppFramework\Http\Attribute\ApiRoute;
use OCP\AppFramework\Http\Attribute\NoAdminRequired;
use OCP\AppFramework\Http\DataResponse;
use OCP\IL10N;
use OCP\IRequest;
use OCP\IUserSession;
use Psr\Log\LoggerInterface;

/**
 * ApprovalsController serves the personal page's approvals: the questions the agent
 * waits on, answering them, and the user's own (stricter) policies. Every action is for
 * the logged-in user only; a question of someone else is not found.
 */
class ApprovalsController extends OcsBaseController {
	public function __construct(
		IRequest $request,
		IUserSession $userSession,
		IL10N $l10n,
		LoggerInterface $logger,
		private readonly ApprovalsService $approvals,
	) {
		parent::__construct($request, $userSession, $l10n, $logger);
	}

	/** {pending, recent, policies: {admin, user, effective}, timeout_seconds}. */
	#[NoAdminRequired]
	#[ApiRoute(verb: 'GET', url: '/api/v1/me/approvals')]
	public function list(): DataResponse {
		return $this->forUser(fn (string $uid): array => $this->approvals->list($uid));
	}

	/** Approves or denies one of the user's waiting questions. */
	#[NoAdminRequired]
	#[ApiRoute(verb: 'POST', url: '/api/v1/me/approvals/{id}', requirements: ['id' => '\d+'])]
	public function decide(int $id, bool $approve = false): DataResponse {
		return $this->forUser(fn (string $uid): array => $this->approvals->decide($uid, $id, $approve));
	}

	/**
	 * Stores the user's own policies per tier ("" follows the admin's).
	 *
	 * @param array<string, mixed> $policies
	 */
	#[NoAdminRequired]
	#[ApiRoute(verb: 'PUT', url: '/api/v1/me/approvals/policies')]
	public function savePolicies(array $policies = []): DataResponse {
		return $this->forUser(fn (string $uid): array => $this->approvals->savePolicies($uid, $policies));
	}
}
