<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Controller;

use OCA\Istota\Service\MeService;
use OCA\Istota\Service\WsTokenMinter;
use OCP\AppFramework\Http\Attribute\ApiRoute;
use OCP\AppFramework\Http\Attribute\NoAdminRequired;
use OCP\AppFramework\Http\DataResponse;
use OCP\IL10N;
use OCP\IRequest;
use OCP\IUserSession;
use Psr\Log\LoggerInterface;

/**
 * MeController serves the personal page's status: who the user is to Istota, their tasks
 * and usage, a task's progress events, stopping their work, and a WebSocket token.
 * Every action is for the logged-in user only; none takes a user id.
 */
class MeController extends OcsBaseController {
	public function __construct(
		IRequest $request,
		IUserSession $userSession,
		IL10N $l10n,
		LoggerInterface $logger,
		private readonly MeService $me,
		private readonly WsTokenMinter $tokens,
	) {
		parent::__construct($request, $userSession, $l10n, $logger);
	}

	/** The session call: {allowed, istota_admin, bot_name, files_path}. */
	#[NoAdminRequired]
	#[ApiRoute(verb: 'GET', url: '/api/v1/me')]
	public function me(): DataResponse {
		return $this->forUser(fn (string $uid): array => $this->me->me($uid));
	}

	/** Running, queued and recent tasks, usage and timezone. */
	#[NoAdminRequired]
	#[ApiRoute(verb: 'GET', url: '/api/v1/me/status')]
	public function status(): DataResponse {
		return $this->forUser(fn (string $uid): array => $this->me->status($uid));
	}

	/** Progress events of one of the user's tasks after sequence number $after. */
	#[NoAdminRequired]
	#[ApiRoute(verb: 'GET', url: '/api/v1/me/tasks/{id}/events', requirements: ['id' => '\d+'])]
	public function events(int $id, int $after = 0): DataResponse {
		return $this->forUser(fn (string $uid): array => $this->me->events($uid, $id, $after));
	}

	/** Stops the running task and drops the queued ones, as !stop does. */
	#[NoAdminRequired]
	#[ApiRoute(verb: 'POST', url: '/api/v1/me/stop')]
	public function stop(): DataResponse {
		return $this->forUser(fn (string $uid): array => $this->me->stop($uid));
	}

	/** {token, url, expires_in} for the sidecar's WebSocket of live progress. */
	#[NoAdminRequired]
	#[ApiRoute(verb: 'POST', url: '/api/v1/me/ws-token')]
	public function wsToken(): DataResponse {
		return $this->forUser(fn (string $uid): array => $this->tokens->mint($uid));
	}
}
